/* Image references, resolved like `docker pull` (distribution/reference's normalization). */
#include <string.h>

#include "images/images.h"

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strchr("0123456789abcdef", s[i]) || !s[i])
			return false;
	return s[n] == '\0';
}

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Path components '/'-separated, each [a-z0-9]+ joined by '.', '_', '__' or '-'+. */
static bool repo_ok(const char *s)
{
	if (!*s || strlen(s) > 255)
		return false;
	const char *p = s;
	for (;;) {
		if (!alnum(*p))
			return false; /* a component or a run after a separator starts alnum */
		while (alnum(*p))
			p++;
		if (!*p)
			return true;
		if (*p == '/' || *p == '.')
			p++;
		else if (*p == '_')
			p += p[1] == '_' ? 2 : 1;
		else if (*p == '-')
			while (*p == '-')
				p++;
		else
			return false;
	}
}

static bool tag_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 128 || s[0] == '.' || s[0] == '-')
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

static bool registry_ok(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n < 256 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == n;
}

int image_ref_parse(const char *s, struct image_ref *ret, struct error *err)
{
	memset(ret, 0, sizeof(*ret));
	if (!s || !*s || strlen(s) > 700)
		return error_set(err, EINVAL, "image reference must be 1 to 700 characters");
	char buf[704];
	snprintf(buf, sizeof(buf), "%s", s);

	char *at = strchr(buf, '@');
	if (at) {
		*at = '\0';
		const char *d = at + 1;
		if (strncmp(d, "sha256:", 7) != 0 || !is_hex(d + 7, IMAGE_HEX_LEN))
			return error_set(err, EINVAL,
					 "image reference '%s': a digest must be sha256: and 64 lowercase hex digits",
					 s);
		snprintf(ret->digest, sizeof(ret->digest), "%s", d);
	}
	/* The first component is a registry when it has a '.' or ':' or is localhost. */
	char *name = buf, *slash = strchr(buf, '/');
	if (slash && (memchr(buf, '.', (size_t)(slash - buf)) ||
		      memchr(buf, ':', (size_t)(slash - buf)) ||
		      (slash - buf == 9 && strncmp(buf, "localhost", 9) == 0))) {
		*slash = '\0';
		if (!registry_ok(buf))
			return error_set(err, EINVAL, "image reference '%s': invalid registry '%s'",
					 s, buf);
		snprintf(ret->registry, sizeof(ret->registry), "%s", buf);
		name = slash + 1;
	} else {
		snprintf(ret->registry, sizeof(ret->registry), "docker.io");
	}
	if (strcmp(ret->registry, "index.docker.io") == 0 ||
	    strcmp(ret->registry, "registry-1.docker.io") == 0)
		snprintf(ret->registry, sizeof(ret->registry), "docker.io");
	bool hub = strcmp(ret->registry, "docker.io") == 0;
	snprintf(ret->host, sizeof(ret->host), "%s", hub ? "registry-1.docker.io" : ret->registry);

	/* A tag is after the last ':' of the last path component. */
	char *last = strrchr(name, '/');
	char *colon = strchr(last ? last : name, ':');
	if (colon) {
		*colon = '\0';
		if (!tag_ok(colon + 1))
			return error_set(err, EINVAL,
					 "image reference '%s': a tag is 1 to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'",
					 s);
		snprintf(ret->tag, sizeof(ret->tag), "%s", colon + 1);
	}
	if (!repo_ok(name))
		return error_set(err, EINVAL,
				 "image reference '%s': the repository must be lowercase letters, digits and single separators ('.', '_', '__', '-', '/')",
				 s);
	int n = snprintf(ret->repo, sizeof(ret->repo), "%s%s", hub && !strchr(name, '/') ? "library/" : "",
			 name);
	if (n >= (int)sizeof(ret->repo))
		return error_set(err, EINVAL, "image reference '%s': repository name too long", s);
	if (!ret->tag[0] && !ret->digest[0])
		snprintf(ret->tag, sizeof(ret->tag), "latest");
	snprintf(ret->name, sizeof(ret->name), "%s/%s%s%s%s%s", ret->registry, ret->repo,
		 ret->tag[0] ? ":" : "", ret->tag, ret->digest[0] ? "@" : "", ret->digest);
	return 0;
}

int image_pull_policy_parse(const char *s, enum image_pull_policy *ret)
{
	if (!s)
		return -EINVAL;
	if (strcmp(s, "IfNotPresent") == 0)
		*ret = IMAGE_PULL_IF_NOT_PRESENT;
	else if (strcmp(s, "Always") == 0)
		*ret = IMAGE_PULL_ALWAYS;
	else if (strcmp(s, "Never") == 0)
		*ret = IMAGE_PULL_NEVER;
	else
		return -EINVAL;
	return 0;
}
