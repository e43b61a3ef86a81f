/* Included by kernels.c after kernels_small.c. */

/* Selection: Top-k by magnitude as torch.topk ranks (where its order is unique), and Random-k's
 * indices drawn as torch draws them, from the state of the codec's torch generator. Both
 * reproduce what torch computes, not merely its distribution, so that payloads keep their bits:
 * lab.compress.native_small compares each with torch at first use and keeps torch's route where
 * they differ (another torch version, another algorithm). */

/* ---- Top-k ---------------------------------------------------------------------------------- */

typedef struct { float v; int64_t i; } entry_t;

static void heap_down(entry_t *h, int64_t size, int64_t at) {  /* a min-heap by v */
    for (;;) {
        int64_t least = at, l = 2 * at + 1, r = l + 1;
        if (l < size && h[l].v < h[least].v) least = l;
        if (r < size && h[r].v < h[least].v) least = r;
        if (least == at) return;
        entry_t t = h[at]; h[at] = h[least]; h[least] = t;
        at = least;
    }
}

/* Moves the `keep` largest v of b[0..m) (0 < keep < m) to b[0..keep): quickselect, a median
 * of three and Hoare's partition a step. */
static void keep_largest(entry_t *b, int64_t m, int64_t keep) {
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) {
        float a = b[lo].v, c = b[lo + (hi - lo) / 2].v, d = b[hi].v;
        float p = a > c ? (c > d ? c : (a > d ? d : a)) : (a > d ? a : (c > d ? d : c));
        int64_t i = lo, j = hi;
        while (i <= j) {  /* descending: b[lo..j] >= p >= b[i..hi] */
            while (b[i].v > p) i++;
            while (b[j].v < p) j--;
            if (i <= j) {
                entry_t t = b[i]; b[i] = b[j]; b[j] = t;
                i++, j--;
            }
        }
        if (keep - 1 <= j) hi = j;
        else if (keep - 1 >= i) lo = i;
        else return;  /* b[j + 1..i - 1] all equal p: position keep - 1 is among them */
    }
}

/* The k entries of largest |x| (0 < k, 64 k <= n) in descending order of |x|: what
 * torch.topk(x.abs(), k, sorted=False) returns there, where torch runs std::partial_sort, which
 * orders them so; the order is unique when the k + 1 largest |x| are distinct. Writes idx[j]
 * (int32) and vals[j] = x[idx[j]], then zeroes clear0 and clear1 (if not NULL) at those
 * indices (DGC's v and u). Returns 0; 1 (nothing written) if some x is NaN or infinite; 2
 * (nothing written) on a tie among the k + 1 largest, where torch's order is its heap's: the
 * caller runs torch.topk. How: candidates above a threshold t go to a buffer of 2 (k + 1);
 * when it is full, quickselect keeps its k + 1 largest and t becomes their least, so that
 * most values cost one compare (a block of 16 whose largest |x| is <= t, none). */
int32_t lab_topk_abs(const float *x, int64_t n, int64_t k, float *vals, int32_t *idx,
                     float *clear0, float *clear1) {
    int64_t keep = k + 1, cap = 2 * keep > 64 ? 2 * keep : 64, m = 0;
    entry_t small[512], *b = cap <= 512 ? small : malloc((size_t)cap * sizeof(entry_t));
    if (!b)
        return 2;
    float t = -1.0f;  /* below every |x|: the first cap values all enter */
    int32_t bad = 0, result = 0;
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        int64_t i1 = n - i0 < 16 ? n : i0 + 16;
        int32_t above = 0;  /* or-reductions, not a max: they vectorize */
        for (int64_t i = i0; i < i1; i++) {
            float a = fabsf(x[i]);
            bad |= !(a <= 3.40282347e38f);  /* NaN or Inf */
            above |= a > t;
        }
        for (int64_t i = i0; i < i1 && above; i++) {
            float a = fabsf(x[i]);
            if (a > t) {
                b[m++] = (entry_t){a, i};
                if (m == cap) {
                    keep_largest(b, m, keep);
                    m = keep;
                    t = b[0].v;
                    for (int64_t j = 1; j < keep; j++)
                        t = b[j].v < t ? b[j].v : t;
                }
            }
        }
    }
    if (m > keep)
        keep_largest(b, m, keep);
    for (int64_t at = keep / 2 - 1; at >= 0; at--)  /* heapsort the k + 1: descending */
        heap_down(b, keep, at);
    for (int64_t end = keep - 1; end > 0; end--) {
        entry_t s = b[0]; b[0] = b[end]; b[end] = s;
        heap_down(b, end, 0);
    }
    for (int64_t j = 0; j < k; j++)
        if (b[j].v == b[j + 1].v)
            result = 2;
    if (bad)
        result = 1;
    for (int64_t j = 0; j < k && !result; j++) {
        idx[j] = (int32_t)b[j].i;
        vals[j] = x[b[j].i];
        if (clear0) clear0[b[j].i] = 0.0f;
        if (clear1) clear1[b[j].i] = 0.0f;
    }
    if (b != small)
        free(b);
    return result;
}

/* DGC's step: dgc_accumulate (returns 1, writing nothing, if some g is NaN or infinite),
 * then, where k > 0, the top k of |v| by lab_topk_abs into vals and idx, clearing v there and
 * u too with `mask` (returns 2 where it declines, a tie or NaN/Inf in v: the caller selects
 * with torch from the accumulated u and v). 0: all done. */
int32_t lab_dgc_step(const float *g, float *u, float *v, int64_t n, float m, int32_t correction,
                     int64_t k, float *vals, int32_t *idx, int32_t mask) {
    if (dgc_accumulate(g, u, v, n, m, correction))
        return 1;
    if (k > 0 && lab_topk_abs(v, n, k, vals, idx, v, mask ? u : NULL))
        return 2;
    return 0;
}

/* ---- torch's CPU generator ----------------------------------------------------------------- */

/* at::mt19937 as torch.Generator.get_state() lays it out (CPUGeneratorImplState): int left at
 * byte 8, uint64 next at 16, 624 uint64 words of state (32 bits used) at 24. The words are
 * used where they lie (the caller's copy of the state, set back into the generator after). */
typedef struct { uint64_t *s; int32_t left; uint32_t next; } mt_t;

static void mt_load(mt_t *m, uint8_t *state) {
    uint64_t next;
    m->s = (uint64_t *)(state + 24);  /* 8-byte aligned: torch's allocation is, and 24 is */
    memcpy(&m->left, state + 8, 4);
    memcpy(&next, state + 16, 8);
    m->next = (uint32_t)next;
}

static void mt_store(const mt_t *m, uint8_t *state) {
    uint64_t next = m->next;
    memcpy(state + 8, &m->left, 4);
    memcpy(state + 16, &next, 8);
}

static inline uint64_t mt_twist1(uint64_t u, uint64_t v) {
    return ((((u & 0x80000000u) | (v & 0x7fffffffu)) >> 1) ^ (v & 1 ? 0x9908b0dfu : 0));
}

static void mt_refill(mt_t *m) {
    uint64_t *p = m->s;
    m->left = 624;
    m->next = 0;
    for (int j = 624 - 397 + 1; --j; p++)
        *p = p[397] ^ mt_twist1(p[0], p[1]);
    for (int j = 397; --j; p++)
        *p = p[397 - 624] ^ mt_twist1(p[0], p[1]);
    *p = p[397 - 624] ^ mt_twist1(p[0], m->s[0]);
}

/* CPUGeneratorImpl::random(): one 32-bit output. */
static inline uint32_t mt_random(mt_t *m) {
    if (--m->left == 0)
        mt_refill(m);
    uint32_t y = (uint32_t)m->s[m->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* The first k of torch.randperm(len) over `pool` (pool[perm[j]]): its Fisher-Yates, one
 * random() % (len - i) a step for i < len - 1; steps from k on touch only positions >= k, so
 * they only draw. */
static int32_t perm_pick(mt_t *m, const int64_t *pool, int64_t len, int64_t k, int64_t *out) {
    int64_t *r = malloc((size_t)(len > 0 ? len : 1) * sizeof(int64_t));
    if (!r)
        return 1;
    for (int64_t i = 0; i < len; i++)
        r[i] = pool ? pool[i] : i;
    for (int64_t i = 0; i < len - 1; i++) {
        int64_t z = (int64_t)(mt_random(m) % (uint64_t)(len - i));
        if (i < k) {
            int64_t t = r[i]; r[i] = r[z + i]; r[z + i] = t;
        }
    }
    memcpy(out, r, (size_t)k * sizeof(int64_t));
    free(r);
    return 0;
}

/* lab.compress.randomk.distinct_indices(n, k, generator) for 0 < k <= n < 2^31, drawn from and
 * advancing `state` (generator.get_state(), set back by the caller): randperm(n)[:k] where
 * 8 k >= n; else rounds of randint(n, (k - have + k / 16 + 8,)) (random() % n each) merged
 * into a sorted set (torch.unique) until it holds k, then randperm of that pool. Where x is
 * not NULL, also vals[j] = x[out[j]] and (if idx32 is not NULL) idx32[j] = out[j]: Random-k's
 * payload. Returns 0; 1 (state untouched) where memory ran out; 2 (nothing drawn) if some x is
 * NaN or infinite, which the codec refuses before drawing. */
int32_t lab_random_indices(uint8_t *state, int64_t n, int64_t k, int64_t *out, const float *x,
                           float *vals, int32_t *idx32) {
    int32_t bad = 0;
    for (int64_t i = 0; x && i < n; i++)
        bad |= !(fabsf(x[i]) <= 3.40282347e38f);  /* NaN or Inf */
    if (bad)
        return 2;
    mt_t m;
    mt_load(&m, state);
    int32_t failed;
    if (k * 8 >= n) {
        failed = perm_pick(&m, NULL, n, k, out);
    } else {
        uint64_t *seen = calloc((size_t)(n + 63) / 64, sizeof(uint64_t));
        int64_t have = 0, *pool = NULL;
        if (seen) {
            while (have < k) {
                for (int64_t d = k - have + k / 16 + 8; d > 0; d--) {
                    uint64_t j = mt_random(&m) % (uint64_t)n;
                    have += !((seen[j / 64] >> (j % 64)) & 1);
                    seen[j / 64] |= 1ull << (j % 64);
                }
            }
            pool = malloc((size_t)have * sizeof(int64_t));
        }
        failed = !pool;
        if (pool) {
            for (int64_t w = 0, c = 0; w < (n + 63) / 64; w++)  /* ascending, as unique sorts */
                for (uint64_t bits = seen[w]; bits; bits &= bits - 1)
                    pool[c++] = 64 * w + __builtin_ctzll(bits);
            failed = perm_pick(&m, pool, have, k, out);
        }
        free(pool);
        free(seen);
    }
    if (failed)
        return 1;
    mt_store(&m, state);
    for (int64_t j = 0; x && j < k; j++)
        vals[j] = x[out[j]];
    for (int64_t j = 0; idx32 && j < k; j++)
        idx32[j] = (int32_t)out[j];
    return 0;
}
