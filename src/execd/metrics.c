#include "metrics.h"
#include "shared/httputil.h"

void metrics_get(struct evhttp_request *req)
{
	http_send_error(req, 501, "NOT_SUPPORTED", "metrics are not supported yet");
}
