#include <stdlib.h>

#include "shared/strv.h"

void strv_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}
