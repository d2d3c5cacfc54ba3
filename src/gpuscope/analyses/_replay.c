/* The what-if replay's longest-path solve in one pass (gpuscope.analyses.whatif.replay).
 *
 * Each node v of the dependency graph has a start S[v] and an end E[v]:
 *   S[v] = max(fixed[v], E[prev[v]] + gap[v], S[launch src] + delay, E[event src])
 *   E[v] = max(S[v] + dur[v], E[wait src] + tail)
 * The 2n quantities and their edges form a DAG; a topological visit relaxes every edge once:
 * O(n + edges). When every chain is a run of consecutive nodes (prev[v] is v - 1 or -1, as
 * whatif/schedule.py builds it), each chain is swept in order and only the edges between chains
 * (launches, events, waits: a fraction of the quantities) are counted and listed: a chain stops
 * at a quantity that still waits for another chain and goes on once that one has been reached
 * (sweep). Otherwise Kahn's algorithm runs on every edge (kahn). Both reach the same values (the
 * least schedule is unique). The numpy fixpoint in whatif/schedule.py is the pure-Python twin
 * (it settles one cross-chain hop per pass, which long zig-zags of tiny kernels between streams
 * make slow); tests compare them. A cycle (which a consistent trace cannot make) returns False
 * and the caller falls back to the twin.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#define REPLAY_NEG (-(((int64_t)1) << 42))

typedef struct {
    Py_buffer b;
    int held;
} Arg;

static int take(PyObject *obj, Arg *a, int writable, Py_ssize_t want) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &a->b, flags) < 0) return -1;
    a->held = 1;
    if (a->b.itemsize != 8 || (a->b.format && a->b.format[0] != 'l' && a->b.format[0] != 'q')) {
        PyErr_SetString(PyExc_TypeError, "replay arrays must be int64");
        return -1;
    }
    if (want >= 0 && a->b.len / 8 != want) {
        PyErr_SetString(PyExc_ValueError, "replay arrays of mismatched lengths");
        return -1;
    }
    return 0;
}

/* The sweep (see the top): S and E are the outputs, filled in place. Returns 1 when every
 * quantity was reached, 0 on a cycle, -1 when memory ran out. Cross edges are listed by their
 * source quantity (S[v] at 2v, E[v] at 2v + 1) in CSR form; pend counts what each quantity
 * still waits for; a chain that stops at a quantity marks it parked, and the edge that brings
 * its count to 0 puts it on the ready stack. */
static int sweep(Py_ssize_t n, const int64_t *prev, const int64_t *gap, const int64_t *dur,
                 const int64_t *fixed, Py_ssize_t m1, const int64_t *ls, const int64_t *ld,
                 const int64_t *lw, Py_ssize_t m2, const int64_t *es, const int64_t *ed,
                 Py_ssize_t m3, const int64_t *ws, const int64_t *wd, const int64_t *wt,
                 int64_t *S, int64_t *E) {
    Py_ssize_t q = 2 * n, m = m1 + m2 + m3;
    int64_t *off = calloc((size_t)q + 1, sizeof(int64_t));
    int64_t *to = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
    int64_t *w = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
    int32_t *pend = calloc((size_t)(q ? q : 1), sizeof(int32_t));
    unsigned char *parked = calloc((size_t)(q ? q : 1), 1);
    int64_t *ready = malloc(sizeof(int64_t) * (size_t)(q ? q : 1));
    int result = -1;
    if (!off || !to || !w || !pend || !parked || !ready) goto out;
    for (Py_ssize_t k = 0; k < m1; k++) { off[2 * ls[k]]++; pend[2 * ld[k]]++; }
    for (Py_ssize_t k = 0; k < m2; k++) { off[2 * es[k] + 1]++; pend[2 * ed[k]]++; }
    for (Py_ssize_t k = 0; k < m3; k++) { off[2 * ws[k] + 1]++; pend[2 * wd[k] + 1]++; }
    /* off[u]: where u's list ends; each list is then filled from its end down. */
    for (Py_ssize_t u = 1; u < q; u++) off[u] += off[u - 1];
    off[q] = m;
    for (Py_ssize_t k = 0; k < m1; k++) {
        int64_t at = --off[2 * ls[k]];
        to[at] = 2 * ld[k]; w[at] = lw[k];
    }
    for (Py_ssize_t k = 0; k < m2; k++) {
        int64_t at = --off[2 * es[k] + 1];
        to[at] = 2 * ed[k]; w[at] = 0;
    }
    for (Py_ssize_t k = 0; k < m3; k++) {
        int64_t at = --off[2 * ws[k] + 1];
        to[at] = 2 * wd[k] + 1; w[at] = wt[k];
    }
    /* off[u] is now where u's list begins, and off[u + 1] where it ends. */
    for (Py_ssize_t v = 0; v < n; v++) { S[v] = fixed[v]; E[v] = REPLAY_NEG; }
    Py_ssize_t top = 0, done = 0;
    for (Py_ssize_t v = 0; v < n; v++)
        if (prev[v] < 0) ready[top++] = 2 * v; /* every chain's first start */
    while (top > 0) {
        int64_t u = ready[--top];
        for (;;) { /* walk the chain from quantity u while nothing stops it */
            int64_t v = u >> 1;
            if (pend[u] > 0) { parked[u] = 1; break; }
            int64_t x;
            if (!(u & 1)) {
                if (prev[v] >= 0 && E[v - 1] + gap[v] > S[v]) S[v] = E[v - 1] + gap[v];
                x = S[v];
                if (x + dur[v] > E[v]) E[v] = x + dur[v];
            } else {
                x = E[v];
            }
            done++;
            for (int64_t k = off[u]; k < off[u + 1]; k++) {
                int64_t t = to[k], y = x + w[k];
                int64_t *slot = (t & 1) ? &E[t >> 1] : &S[t >> 1];
                if (y > *slot) *slot = y;
                if (--pend[t] == 0 && parked[t]) ready[top++] = t;
            }
            if (!(u & 1)) u = u + 1;
            else if (v + 1 < n && prev[v + 1] == v) u = u + 1;
            else break;
        }
    }
    result = done == q;
out:
    free(off);
    free(to);
    free(w);
    free(pend);
    free(parked);
    free(ready);
    return result;
}

/* Kahn's algorithm on every edge (chains of any shape). Same contract as sweep. */
static int kahn(Py_ssize_t n, const int64_t *prev, const int64_t *gap, const int64_t *dur,
                const int64_t *fixed, Py_ssize_t m1, const int64_t *ls, const int64_t *ld,
                const int64_t *lw, Py_ssize_t m2, const int64_t *es, const int64_t *ed,
                Py_ssize_t m3, const int64_t *ws, const int64_t *wd, const int64_t *wt,
                int64_t *S, int64_t *E) {
    Py_ssize_t q = 2 * n, edges = n + n + m1 + m2 + m3;
    int64_t *val = malloc(sizeof(int64_t) * (size_t)(q ? q : 1)); /* S in [0, n), E in [n, 2n) */
    int64_t *indeg = calloc((size_t)(q ? q : 1), sizeof(int64_t));
    int64_t *start = calloc((size_t)q + 1, sizeof(int64_t));
    int64_t *fill = calloc((size_t)q + 1, sizeof(int64_t));
    int64_t *to = malloc(sizeof(int64_t) * (size_t)(edges ? edges : 1));
    int64_t *weight = malloc(sizeof(int64_t) * (size_t)(edges ? edges : 1));
    int64_t *queue = malloc(sizeof(int64_t) * (size_t)(q ? q : 1));
    int result = -1;
    if (!val || !indeg || !start || !fill || !to || !weight || !queue) goto out;
    int bad = 0;
    result = 0;
    /* Out-degree counts, then the CSR offsets. */
#define COUNT(u) do { if ((u) < 0 || (u) >= q) bad = 1; else start[(u) + 1]++; } while (0)
    for (Py_ssize_t v = 0; v < n; v++) {
        COUNT(v); /* S[v] -> E[v] */
        if (prev[v] >= 0) COUNT(n + prev[v]);
    }
    for (Py_ssize_t k = 0; k < m1; k++) COUNT(ls[k]);
    for (Py_ssize_t k = 0; k < m2; k++) COUNT(n + es[k]);
    for (Py_ssize_t k = 0; k < m3; k++) COUNT(n + ws[k]);
#undef COUNT
    for (Py_ssize_t k = 0; k < m1 && !bad; k++) bad = ld[k] < 0 || ld[k] >= n;
    for (Py_ssize_t k = 0; k < m2 && !bad; k++) bad = ed[k] < 0 || ed[k] >= n;
    for (Py_ssize_t k = 0; k < m3 && !bad; k++) bad = wd[k] < 0 || wd[k] >= n;
    if (bad) goto out;
    for (Py_ssize_t u = 0; u < q; u++) start[u + 1] += start[u];
    for (Py_ssize_t u = 0; u <= q; u++) fill[u] = start[u];
#define ADD(u, w, x) do { to[fill[u]] = (w); weight[fill[u]++] = (x); indeg[w]++; } while (0)
    for (Py_ssize_t v = 0; v < n; v++) {
        ADD(v, n + v, dur[v]);
        if (prev[v] >= 0) ADD(n + prev[v], v, gap[v]);
    }
    for (Py_ssize_t k = 0; k < m1; k++) ADD(ls[k], ld[k], lw[k]);
    for (Py_ssize_t k = 0; k < m2; k++) ADD(n + es[k], ed[k], 0);
    for (Py_ssize_t k = 0; k < m3; k++) ADD(n + ws[k], n + wd[k], wt[k]);
#undef ADD
    for (Py_ssize_t v = 0; v < n; v++) {
        val[v] = fixed[v];
        val[n + v] = REPLAY_NEG;
    }
    Py_ssize_t head = 0, tail = 0;
    for (Py_ssize_t u = 0; u < q; u++)
        if (indeg[u] == 0) queue[tail++] = u;
    while (head < tail) {
        int64_t u = queue[head++];
        for (int64_t k = start[u]; k < start[u + 1]; k++) {
            int64_t w = to[k], x = val[u] + weight[k];
            if (x > val[w]) val[w] = x;
            if (--indeg[w] == 0) queue[tail++] = w;
        }
    }
    result = tail == q; /* every quantity visited: no cycle */
    if (result)
        for (Py_ssize_t v = 0; v < n; v++) {
            S[v] = val[v];
            E[v] = val[n + v];
        }
out:
    free(val);
    free(indeg);
    free(start);
    free(fill);
    free(to);
    free(weight);
    free(queue);
    return result;
}

static PyObject *solve(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[14];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13]))
        return NULL;
    Arg a[14];
    for (int i = 0; i < 14; i++) a[i].held = 0;
    PyObject *result = NULL;
    /* prev, gap, dur, fixed | ls, ld, lw | es, ed | ws, wd, wt | s_out, e_out */
    if (take(o[0], &a[0], 0, -1) < 0) goto done;
    Py_ssize_t n = a[0].b.len / 8;
    for (int i = 1; i < 4; i++)
        if (take(o[i], &a[i], 0, n) < 0) goto done;
    if (take(o[4], &a[4], 0, -1) < 0) goto done;
    Py_ssize_t m1 = a[4].b.len / 8;
    for (int i = 5; i < 7; i++)
        if (take(o[i], &a[i], 0, m1) < 0) goto done;
    if (take(o[7], &a[7], 0, -1) < 0) goto done;
    Py_ssize_t m2 = a[7].b.len / 8;
    if (take(o[8], &a[8], 0, m2) < 0) goto done;
    if (take(o[9], &a[9], 0, -1) < 0) goto done;
    Py_ssize_t m3 = a[9].b.len / 8;
    for (int i = 10; i < 12; i++)
        if (take(o[i], &a[i], 0, m3) < 0) goto done;
    for (int i = 12; i < 14; i++)
        if (take(o[i], &a[i], 1, n) < 0) goto done;

    const int64_t *prev = a[0].b.buf, *gap = a[1].b.buf, *dur = a[2].b.buf, *fixed = a[3].b.buf;
    const int64_t *ls = a[4].b.buf, *ld = a[5].b.buf, *lw = a[6].b.buf;
    const int64_t *es = a[7].b.buf, *ed = a[8].b.buf;
    const int64_t *ws = a[9].b.buf, *wd = a[10].b.buf, *wt = a[11].b.buf;
    int64_t *S = a[12].b.buf, *E = a[13].b.buf;
    int solved;

    Py_BEGIN_ALLOW_THREADS
    /* The sweep when every index is in range and every chain is a run of consecutive nodes. */
    int chains = 2 * n < INT32_MAX && m1 + m2 + m3 < INT32_MAX;
    for (Py_ssize_t v = 0; v < n && chains; v++) chains = prev[v] == -1 || prev[v] == v - 1;
    for (Py_ssize_t k = 0; k < m1 && chains; k++)
        chains = ls[k] >= 0 && ls[k] < n && ld[k] >= 0 && ld[k] < n;
    for (Py_ssize_t k = 0; k < m2 && chains; k++)
        chains = es[k] >= 0 && es[k] < n && ed[k] >= 0 && ed[k] < n;
    for (Py_ssize_t k = 0; k < m3 && chains; k++)
        chains = ws[k] >= 0 && ws[k] < n && wd[k] >= 0 && wd[k] < n;
    if (chains)
        solved = sweep(n, prev, gap, dur, fixed, m1, ls, ld, lw, m2, es, ed, m3, ws, wd, wt, S, E);
    else
        solved = kahn(n, prev, gap, dur, fixed, m1, ls, ld, lw, m2, es, ed, m3, ws, wd, wt, S, E);
    Py_END_ALLOW_THREADS

    if (solved < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyBool_FromLong(solved);
done:
    for (int i = 0; i < 14; i++)
        if (a[i].held) PyBuffer_Release(&a[i].b);
    return result;
}

/* last_containing(starts, ends, t, order, out): for each time t[i], the position of the last
 * interval with starts[k] <= t[i] <= ends[k] (intervals sorted by start, nested or overlapping
 * as they like), -1 when none; ``order`` visits the times in ascending order. One sweep: the
 * intervals begun by then are pushed in order, and those that ended before a time are popped
 * from the top (they end before every later time too), so the top is the last one still
 * running. O(intervals + times). The numpy twin is gpuscope.analyses.intervals.last_containing. */
static PyObject *last_containing(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    Arg a[5];
    for (int i = 0; i < 5; i++) a[i].held = 0;
    PyObject *result = NULL;
    int64_t *stack = NULL;
    if (take(o[0], &a[0], 0, -1) < 0) goto done;
    Py_ssize_t n = a[0].b.len / 8;
    if (take(o[1], &a[1], 0, n) < 0) goto done;
    if (take(o[2], &a[2], 0, -1) < 0) goto done;
    Py_ssize_t m = a[2].b.len / 8;
    if (take(o[3], &a[3], 0, m) < 0) goto done;
    if (take(o[4], &a[4], 1, m) < 0) goto done;
    const int64_t *starts = a[0].b.buf, *ends = a[1].b.buf, *t = a[2].b.buf, *order = a[3].b.buf;
    int64_t *out = a[4].b.buf;
    for (Py_ssize_t i = 0; i < m; i++)
        if (order[i] < 0 || order[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "order is not a permutation of the times");
            goto done;
        }
    stack = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!stack) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t next = 0, top = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t at = t[order[i]];
        while (next < n && starts[next] <= at) stack[top++] = next++;
        while (top > 0 && ends[stack[top - 1]] < at) top--;
        out[order[i]] = top > 0 ? stack[top - 1] : -1;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(stack);
    for (int i = 0; i < 5; i++)
        if (a[i].held) PyBuffer_Release(&a[i].b);
    return result;
}

static PyMethodDef methods[] = {
    {"solve", solve, METH_VARARGS,
     "solve(prev, gap, dur, fixed, ls, ld, lw, es, ed, ws, wd, wt, s_out, e_out) -> bool"},
    {"last_containing", last_containing, METH_VARARGS,
     "last_containing(starts, ends, t, order, out) -> None"},
    {NULL, NULL, 0, NULL},
};

/* Raised whenever what the solver takes or returns changes: the Python side does not use a build
 * of older source (gpuscope.analyses.whatif.schedule.REPLAY_VERSION). */
#define REPLAY_VERSION 2

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_replay", NULL, -1, methods};

PyMODINIT_FUNC PyInit__replay(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddIntConstant(module, "VERSION", REPLAY_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
