/*
 * libcorral's threads at work: many caller threads share one client (its transport thread and
 * connection pool) while its reaper threads delete released sandboxes, against a stub HTTP/1.1
 * server on loopback. Every call must succeed and the server must see exactly the requests made.
 * Its real job is the ThreadSanitizer pass (make tsan; CI): a data race in the transport, the
 * reapers or the handover between them fails this test there.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "corral/corral.h"

#define THREADS 8
#define ROUNDS 25
#define CONNS_MAX 64
#define ID "0123456789abcdef0123456789abcdef"

static struct {
	int listen_fd, stop_pipe[2];
	atomic_int gets, deletes, other;
} S;

struct conn {
	int fd;
	size_t len;
	char buf[4096];
};

/* Answers one complete request in c->buf (no request here has a body), keeping the connection. */
static int answer(struct conn *c, char *end)
{
	char resp[512];
	int n;
	if (strncmp(c->buf, "GET /v1/sandboxes/" ID " ", strlen("GET /v1/sandboxes/" ID " ")) == 0) {
		atomic_fetch_add(&S.gets, 1);
		const char *body = "{\"id\":\"" ID "\",\"status\":{\"state\":\"Running\"}}";
		n = snprintf(resp, sizeof(resp),
			     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			     "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	} else if (strncmp(c->buf, "DELETE /v1/sandboxes/", strlen("DELETE /v1/sandboxes/")) == 0) {
		atomic_fetch_add(&S.deletes, 1);
		n = snprintf(resp, sizeof(resp), "HTTP/1.1 204 No Content\r\n\r\n");
	} else {
		atomic_fetch_add(&S.other, 1);
		n = snprintf(resp, sizeof(resp), "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
	}
	size_t used = (size_t)(end + 4 - c->buf);
	memmove(c->buf, c->buf + used, c->len - used);
	c->len -= used;
	c->buf[c->len] = 0;
	return write(c->fd, resp, (size_t)n) == n ? 0 : -1;
}

static void *server_main(void *arg)
{
	(void)arg;
	struct conn *conns = calloc(CONNS_MAX, sizeof(*conns));
	struct pollfd pfd[CONNS_MAX + 2];
	size_t n = 0;
	if (!conns)
		abort();
	for (;;) {
		pfd[0] = (struct pollfd){.fd = S.stop_pipe[0], .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = S.listen_fd, .events = n < CONNS_MAX ? POLLIN : 0};
		for (size_t i = 0; i < n; i++)
			pfd[i + 2] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
		if (poll(pfd, n + 2, -1) < 0 && errno != EINTR)
			abort();
		if (pfd[0].revents)
			break;
		for (size_t i = n; i-- > 0;) {
			struct conn *c = &conns[i];
			if (!pfd[i + 2].revents)
				continue;
			ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
			bool drop = r <= 0;
			if (r > 0) {
				c->len += (size_t)r;
				c->buf[c->len] = 0;
				char *end;
				while (!drop && (end = strstr(c->buf, "\r\n\r\n")))
					drop = answer(c, end) < 0;
				drop = drop || c->len == sizeof(c->buf) - 1;
			}
			if (drop) {
				close(c->fd);
				conns[i] = conns[--n];
			}
		}
		if (pfd[1].revents & POLLIN) {
			int fd = accept4(S.listen_fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				conns[n++] = (struct conn){.fd = fd};
		}
	}
	for (size_t i = 0; i < n; i++)
		close(conns[i].fd);
	free(conns);
	return NULL;
}

/* check.h's counters are not atomic: caller threads count their failures here instead. */
static atomic_int caller_failures;

static void caller_fail(const char *what, const corral_error *err)
{
	atomic_fetch_add(&caller_failures, 1);
	fprintf(stderr, "FAIL: %s: %s\n", what, err ? err->message : "");
}

static void *caller_main(void *arg)
{
	corral_client *c = arg;
	for (int i = 0; i < ROUNDS; i++) {
		corral_error err;
		char *json = NULL;
		if (corral_sandbox_get_json(c, ID, &json, &err) < 0)
			caller_fail("get", &err);
		else if (!strstr(json, "\"" ID "\""))
			caller_fail("get: the answer lacks the id", NULL);
		free(json);
		if (corral_sandbox_delete_id(c, ID, &err) < 0)
			caller_fail("delete", &err);
		corral_sandbox *sb = NULL;
		if (corral_sandbox_from_id(c, ID, &sb, &err) < 0)
			caller_fail("from_id", &err);
		corral_sandbox_release(sb); /* a background delete by a reaper thread */
	}
	return NULL;
}

static void test_shared_client(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	S.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(S.listen_fd >= 0);
	CHECK_INT(bind(S.listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_INT(listen(S.listen_fd, 128), 0);
	CHECK_INT(getsockname(S.listen_fd, (struct sockaddr *)&a, &alen), 0);
	CHECK_INT(pipe2(S.stop_pipe, O_CLOEXEC), 0);
	pthread_t server;
	CHECK_INT(pthread_create(&server, NULL, server_main, NULL), 0);

	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
	corral_options o;
	corral_options_init(&o);
	o.server = url;
	o.api_key = "k";
	o.attribution = false;
	corral_client *c = NULL;
	corral_error err;
	CHECK_INT(corral_client_new(&o, &c, &err), 0);

	pthread_t callers[THREADS];
	for (int i = 0; i < THREADS; i++)
		CHECK_INT(pthread_create(&callers[i], NULL, caller_main, c), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(callers[i], NULL);
	CHECK_INT(atomic_load(&caller_failures), 0);
	char **left = NULL;
	CHECK_INT(corral_client_drain(c, 30, &left, &err), 0);
	corral_strv_free(left);
	corral_client_free(c);

	CHECK_INT(write(S.stop_pipe[1], "x", 1), 1);
	pthread_join(server, NULL);
	close(S.stop_pipe[0]);
	close(S.stop_pipe[1]);
	close(S.listen_fd);
	/* from_id asks nothing of the server: one GET, one DELETE and one reaped DELETE a round. */
	CHECK_INT(atomic_load(&S.gets), THREADS * ROUNDS);
	CHECK_INT(atomic_load(&S.deletes), 2 * THREADS * ROUNDS);
	CHECK_INT(atomic_load(&S.other), 0);
}

int main(void)
{
	test_shared_client();
	return check_summary("client_threads");
}
