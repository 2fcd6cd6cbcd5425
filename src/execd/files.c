/* Placeholder until the files API lands: claims no paths. */
#include "files.h"

bool files_dispatch(struct evhttp_request *req, const char *path)
{
	(void)req;
	(void)path;
	return false;
}
