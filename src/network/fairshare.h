/*
 * A fair share of one countable resource (the resolver's queries waiting for upstream, its TCP
 * connections) among members that take and give back one unit at a time (resolver.c: one member
 * per sandbox with something in flight). Pure and O(1) per call.
 *
 * Every member may hold `reserved` units whatever the others hold: those never come out of the
 * shared pool, so no set of other members can take them (the total is bounded by the pool plus
 * `reserved` for each member, and a member exists only while it holds something). Above its
 * reservation a member draws on a pool of `shared` units common to all, up to `per_member` units
 * in all. When the pool is empty, a member that holds fewer than the heaviest member less one may
 * still take a unit: the heaviest gives one back first (fair_pool_admit() names it, the caller
 * takes the unit back from it, oldest first). So the pool converges to max-min fairness: with N
 * members wanting more than they have, each ends with shared/N units above its reservation
 * (rounded down; or its maximum), and none can starve the others by asking more often or holding
 * longer.
 *
 * The heaviest member is found in O(1): members sit in one list per count of units held, and the
 * highest non-empty count is kept (counts change by one, so it moves by at most one step).
 */
#pragma once

#include <stdbool.h>
#include <sys/queue.h>

struct fair_member {
	LIST_ENTRY(fair_member) link; /* in its pool's list of members holding n units (n > 0) */
	unsigned n;                   /* units held */
};

LIST_HEAD(fair_list, fair_member);

struct fair_pool {
	unsigned reserved;   /* units each member may hold whatever the others hold */
	unsigned per_member; /* units one member may hold at most */
	unsigned shared;     /* units above the reservations, all members together */
	unsigned used;       /* of shared, taken */
	unsigned top;        /* units the heaviest member holds; 0 when nobody holds any */
	struct fair_list *by_n; /* [per_member + 1]: the members holding n units */
};

enum fair_verdict {
	FAIR_ADMIT,  /* take the unit */
	FAIR_EVICT,  /* take it once the member named gave one of its units back */
	FAIR_REFUSE, /* the member holds its maximum, or its fair share of a full pool */
};

/* -EINVAL for per_member 0 or reserved above per_member, -ENOMEM. */
int fair_pool_init(struct fair_pool *p, unsigned reserved, unsigned per_member, unsigned shared);
/* Every member must have given its units back (or be forgotten with the pool). */
void fair_pool_clear(struct fair_pool *p);

/* Whether m may take one more unit; for FAIR_EVICT, *ret_victim is the member to take one from. */
enum fair_verdict fair_pool_admit(const struct fair_pool *p, const struct fair_member *m,
				  struct fair_member **ret_victim);
/* One more unit for m (after FAIR_ADMIT, or FAIR_EVICT and the victim's fair_pool_give()). */
void fair_pool_take(struct fair_pool *p, struct fair_member *m);
/* One unit of m's back (m holds at least one). */
void fair_pool_give(struct fair_pool *p, struct fair_member *m);
