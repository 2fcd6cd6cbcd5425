/* A fair share of a countable resource (fairshare.h). */
#include <errno.h>
#include <stdlib.h>

#include "network/fairshare.h"

int fair_pool_init(struct fair_pool *p, unsigned reserved, unsigned per_member, unsigned shared)
{
	*p = (struct fair_pool){0};
	if (per_member == 0 || reserved > per_member)
		return -EINVAL;
	p->by_n = calloc((size_t)per_member + 1, sizeof(*p->by_n));
	if (!p->by_n)
		return -ENOMEM;
	for (unsigned i = 0; i <= per_member; i++)
		LIST_INIT(&p->by_n[i]);
	p->reserved = reserved;
	p->per_member = per_member;
	p->shared = shared;
	return 0;
}

void fair_pool_clear(struct fair_pool *p)
{
	free(p->by_n);
	*p = (struct fair_pool){0};
}

enum fair_verdict fair_pool_admit(const struct fair_pool *p, const struct fair_member *m,
				  struct fair_member **ret_victim)
{
	if (m->n >= p->per_member)
		return FAIR_REFUSE;
	if (m->n < p->reserved || p->used < p->shared)
		return FAIR_ADMIT;
	/* The pool is taken. Only from a member holding two more than m: taking from one that holds
	 * one more would swap the two and gain nothing (and they would take it back in turn). */
	if (p->top < m->n + 2)
		return FAIR_REFUSE;
	*ret_victim = LIST_FIRST(&p->by_n[p->top]);
	return FAIR_EVICT;
}

void fair_pool_take(struct fair_pool *p, struct fair_member *m)
{
	if (m->n)
		LIST_REMOVE(m, link);
	m->n++;
	LIST_INSERT_HEAD(&p->by_n[m->n], m, link);
	if (m->n > p->reserved)
		p->used++;
	if (m->n > p->top)
		p->top = m->n;
}

void fair_pool_give(struct fair_pool *p, struct fair_member *m)
{
	LIST_REMOVE(m, link);
	if (m->n > p->reserved)
		p->used--;
	m->n--;
	if (m->n)
		LIST_INSERT_HEAD(&p->by_n[m->n], m, link);
	/* Counts move by one: when m was the last at top, it now holds top - 1 (or nobody holds
	 * anything), so this steps down once at most. */
	while (p->top && LIST_EMPTY(&p->by_n[p->top]))
		p->top--;
}
