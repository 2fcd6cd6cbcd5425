/* image_ref_parse(): references resolved and normalized the way `docker pull` does. */
#include "check.h"
#include "images/images.h"

static void ok(const char *in, const char *name, const char *host, const char *repo)
{
	struct image_ref r;
	struct error e = {0};
	CHECK_INT(image_ref_parse(in, &r, &e), 0);
	CHECK_STR(r.name, name);
	CHECK_STR(r.host, host);
	CHECK_STR(r.repo, repo);
}

static void bad(const char *in)
{
	struct image_ref r;
	struct error e = {0};
	CHECK_INT(image_ref_parse(in, &r, &e), -EINVAL);
	CHECK(e.msg[0] != '\0');
}

int main(void)
{
	const char *d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char in[256], out[256];
	ok("python:3.11", "docker.io/library/python:3.11", "registry-1.docker.io", "library/python");
	ok("python", "docker.io/library/python:latest", "registry-1.docker.io", "library/python");
	ok("swebench/sweb.eval.x86_64.django__django-11099:latest",
	   "docker.io/swebench/sweb.eval.x86_64.django__django-11099:latest",
	   "registry-1.docker.io", "swebench/sweb.eval.x86_64.django__django-11099");
	ok("index.docker.io/library/ubuntu", "docker.io/library/ubuntu:latest",
	   "registry-1.docker.io", "library/ubuntu");
	ok("docker.io/ubuntu:22.04", "docker.io/library/ubuntu:22.04", "registry-1.docker.io",
	   "library/ubuntu");
	ok("127.0.0.1:5000/team/task:1", "127.0.0.1:5000/team/task:1", "127.0.0.1:5000",
	   "team/task");
	ok("localhost/x", "localhost/x:latest", "localhost", "x");
	ok("ghcr.io/a/b-c/d", "ghcr.io/a/b-c/d:latest", "ghcr.io", "a/b-c/d");
	ok("registry.internal:5000/team/task", "registry.internal:5000/team/task:latest",
	   "registry.internal:5000", "team/task");
	snprintf(in, sizeof(in), "ghcr.io/o/r@%s", d);
	snprintf(out, sizeof(out), "ghcr.io/o/r@%s", d);
	ok(in, out, "ghcr.io", "o/r");
	snprintf(in, sizeof(in), "python:3.11@%s", d);
	snprintf(out, sizeof(out), "docker.io/library/python:3.11@%s", d);
	ok(in, out, "registry-1.docker.io", "library/python");

	bad("");
	bad("Python:3");      /* uppercase repository */
	bad("../../etc");
	bad("/etc");
	bad("host/../x");
	bad("a//b");
	bad("a/-b");
	bad("a:");            /* empty tag */
	bad("a:-x");          /* tag starting with '-' */
	bad("a@sha256:abc");  /* short digest */
	bad("a@md5:0123456789abcdef0123456789abcdef");
	bad("a b");
	bad("a/b?c");
	return check_summary("images_reference");
}
