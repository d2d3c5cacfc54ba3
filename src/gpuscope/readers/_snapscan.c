/* PyTorch memory snapshot scanner: a snapshot pickle's opcodes walked once, its allocator trace
 * entries straight into columns, nothing else of the pickle kept but plain data.
 *
 * Contract (the Python side is gpuscope/readers/snapshot.py, whose reference reader, a
 * NoGlobalsUnpickler plus the same column building, gives identical records and is what runs
 * wherever this scanner says UnsupportedError):
 *
 *   scan(read: Callable[[int], bytes], sentinel: object)
 *       -> (document, columns, owners, frame_objects, stacks, unknown_actions)
 *
 * ``read(n)`` gives the next at most n bytes of the pickle (b"" at its end). Only the opcodes of
 * plain data are followed (protocol 2-5: ints, floats, str, bytes, None, bools, tuples, lists,
 * dicts, the memo, frames). Any opcode that names a global (GLOBAL, STACK_GLOBAL, INST) raises
 * RefusedError("it names the global MODULE.NAME"), a persistent id (PERSID, BINPERSID)
 * RefusedError("it holds a persistent id"): nothing is imported, called or built from them. The end
 * of the data before STOP raises TruncatedError. Anything else this scanner does not follow (another
 * opcode, a malformed stack, a value beyond 64 bits where a column needs it, sharing it does not
 * expect) raises UnsupportedError: the caller then reads the snapshot the reference way.
 *
 * What is not built: the lists directly inside the top-level ``device_traces`` list hold, where
 * each trace entry dict would be, ``sentinel``; each entry is one row of the columns instead, in
 * the order the entries were appended. An entry's ``frames`` list is interned while the entry is
 * read (and the memo keeps the interned id, not the list), so neither the entries nor their
 * tracebacks stay in memory:
 *
 * columns         dict of bytearrays: "action" uint8 (0-8 as MemoryAction, 255 unknown),
 *                 "address", "size", "stream", "time_us" int64 (-1: not an int; "size" also
 *                 has "size_ok" uint8, 0 when it is not exactly an int), "stack" int32 (index
 *                 in stacks, -1: no frames), "owner" int32 (index in owners)
 * owners          the lists the rows were appended to, in order of their first row
 * frame_objects   each distinct frame object (by identity) an entry's frames list held
 * stacks          per distinct frames list (by the frame objects it holds), bytes of int32
 *                 indexes into frame_objects, innermost first as listed
 * unknown_actions the "action" value of each row whose action is 255 (None when absent), in
 *                 row order
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SNAPSCAN_VERSION 2
#define CHUNK (4 << 20)

static PyObject *RefusedError, *UnsupportedError, *TruncatedError;

enum { PLAIN = 0, OUTER = 1, ENTRIES = 2, ENTRY = 3, STACK = 4 };
/* memo flags: what GET of the slot gives */
enum { M_PLAIN = 0, M_GONE = 1, M_STACK = 2 };

/* a trace entry being read: the values of the keys a row needs, never a dict */
typedef struct {
    PyObject *action, *addr, *size, *stream, *time_us;
    int64_t frames; /* its stack id, -1: none */
} Entry;

typedef struct {
    PyObject *obj; /* (None for an entry: its values are in entry) */
    Entry *entry;
    int64_t memo; /* the memo slot this object is stored in, -1: none known */
    int32_t owner;
    uint8_t kind;
} Slot;

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

typedef struct {
    /* input */
    PyObject *read;
    char *buf;
    size_t pos, len, cap;
    int eof;
    size_t base;       /* the offset in the pickle of buf[0] */
    int64_t frame_end; /* the offset where the current FRAME ends, -1: none */
    /* machine */
    Slot *stack;
    size_t depth, stack_cap;
    size_t *marks;
    size_t nmarks, marks_cap;
    PyObject **memo;
    uint8_t *memo_flag;
    size_t memo_cap, memo_len;
    /* output */
    Buf action, address, size, size_ok, stream, time_us, stack_col, owner;
    size_t rows;
    PyObject *owners, *frame_objects, *stacks, *unknown, *sentinel;
    /* frame objects by address */
    PyObject **fkeys;
    int32_t *fvals;
    size_t fcap, fcount;
    /* stacks by content */
    int32_t *pool;
    size_t pool_len, pool_cap;
    size_t *soff; /* per stack: offset in pool */
    uint32_t *slen;
    size_t scount, scap;
    int64_t *stab; /* hash table of stack ids, -1 empty */
    size_t stab_cap;
    int32_t *scratch;
    size_t scratch_cap;
    PyObject *key_frames, *key_action, *key_addr, *key_size, *key_stream, *key_time, *key_device_free,
        *key_device_traces;
    PyObject *action_names[9];
    /* the pickle's own str objects last found equal to a key or action name (held): the same
     * memoised string recurs in every entry, so a pointer comparison finds it */
    PyObject *key_alias[7], *action_alias[9];
} M;

static void *fail_unsupported(const char *why) {
    if (!PyErr_Occurred() || !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        PyErr_SetString(UnsupportedError, why);
    }
    return NULL;
}
#define UNSUPPORTED(why) (fail_unsupported(why), -1)

static int buf_put(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->len + n) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* n contiguous bytes at m->buf + m->pos, reading more as needed; -1 with Truncated at the end */
static int need(M *m, size_t n) {
    if (m->len - m->pos >= n) return 0;
    size_t have = m->len - m->pos;
    memmove(m->buf, m->buf + m->pos, have);
    m->base += m->pos;
    m->len = have;
    m->pos = 0;
    if (n > m->cap) {
        char *p = realloc(m->buf, n);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        m->buf = p;
        m->cap = n;
    }
    while (m->len < n) {
        if (m->eof) {
            PyErr_SetString(TruncatedError, "the pickle is cut off");
            return -1;
        }
        size_t want = m->cap - m->len;
        PyObject *got = PyObject_CallFunction(m->read, "n", (Py_ssize_t)want);
        if (!got) return -1;
        if (!PyBytes_Check(got)) {
            Py_DECREF(got);
            PyErr_SetString(PyExc_TypeError, "read() must return bytes");
            return -1;
        }
        size_t k = (size_t)PyBytes_GET_SIZE(got);
        if (k > want) k = want;
        if (k == 0) m->eof = 1;
        memcpy(m->buf + m->len, PyBytes_AS_STRING(got), k);
        m->len += k;
        Py_DECREF(got);
    }
    return 0;
}

static int line(M *m, const char **start, size_t *n) {
    size_t scanned = 0;
    for (;;) {
        char *nl = memchr(m->buf + m->pos + scanned, '\n', m->len - m->pos - scanned);
        if (nl) {
            *start = m->buf + m->pos;
            *n = (size_t)(nl - *start);
            m->pos += *n + 1;
            return 0;
        }
        scanned = m->len - m->pos;
        if (need(m, scanned + 1) < 0) return -1;
    }
}

static int push(M *m, PyObject *obj, uint8_t kind) { /* steals obj */
    if (!obj) return -1;
    if (m->depth == m->stack_cap) {
        size_t cap = m->stack_cap ? m->stack_cap * 2 : 256;
        Slot *s = realloc(m->stack, cap * sizeof(Slot));
        if (!s) {
            Py_DECREF(obj);
            PyErr_NoMemory();
            return -1;
        }
        m->stack = s;
        m->stack_cap = cap;
    }
    m->stack[m->depth++] = (Slot){obj, NULL, -1, -1, kind};
    return 0;
}

static void entry_free(Entry *e) {
    if (!e) return;
    Py_XDECREF(e->action);
    Py_XDECREF(e->addr);
    Py_XDECREF(e->size);
    Py_XDECREF(e->stream);
    Py_XDECREF(e->time_us);
    free(e);
}

static size_t base(M *m) { return m->nmarks ? m->marks[m->nmarks - 1] : 0; }

static int pop_mark(M *m, size_t *at) {
    if (!m->nmarks) return UNSUPPORTED("no mark");
    *at = m->marks[--m->nmarks];
    if (*at > m->depth) return UNSUPPORTED("mark beyond the stack");
    return 0;
}

static void drop_to(M *m, size_t at) {
    while (m->depth > at) {
        Slot *s = &m->stack[--m->depth];
        entry_free(s->entry);
        Py_DECREF(s->obj);
    }
}

/* a slot consumed as plain data (into a tuple, a plain list or dict, the result) */
static int plain(Slot *s) {
    if (s->kind == ENTRY || s->kind == STACK || s->kind == ENTRIES)
        return UNSUPPORTED("a trace entry shared beyond its list");
    return 0;
}

static int memo_grow(M *m, size_t index) {
    if (index >= ((size_t)1 << 31)) return UNSUPPORTED("memo index too large");
    if (index < m->memo_cap) return 0;
    size_t cap = m->memo_cap ? m->memo_cap : 1024;
    while (cap <= index) cap *= 2;
    PyObject **p = realloc(m->memo, cap * sizeof(PyObject *));
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    m->memo = p;
    uint8_t *f = realloc(m->memo_flag, cap);
    if (!f) {
        PyErr_NoMemory();
        return -1;
    }
    m->memo_flag = f;
    memset(m->memo + m->memo_cap, 0, (cap - m->memo_cap) * sizeof(PyObject *));
    memset(m->memo_flag + m->memo_cap, M_PLAIN, cap - m->memo_cap);
    m->memo_cap = cap;
    return 0;
}

static int memo_put(M *m, size_t index) {
    if (!m->depth) return UNSUPPORTED("memo of an empty stack");
    if (memo_grow(m, index) < 0) return -1;
    Slot *s = &m->stack[m->depth - 1];
    PyObject *old = m->memo[index];
    Py_INCREF(s->obj);
    m->memo[index] = s->obj;
    Py_XDECREF(old);
    m->memo_flag[index] = s->kind == STACK ? M_STACK : (s->kind == PLAIN || s->kind == OUTER) ? M_PLAIN : M_GONE;
    if (index >= m->memo_len) m->memo_len = index + 1;
    s->memo = (int64_t)index;
    return 0;
}

static int memo_get(M *m, size_t index) {
    if (index >= m->memo_cap || !m->memo[index] || m->memo_flag[index] == M_GONE)
        return UNSUPPORTED("a memo entry this scanner does not keep");
    PyObject *o = m->memo[index];
    Py_INCREF(o);
    if (push(m, o, m->memo_flag[index] == M_STACK ? STACK : PLAIN) < 0) return -1;
    m->stack[m->depth - 1].memo = (int64_t)index;
    return 0;
}

static int is_key(PyObject *k, PyObject *name) {
    if (!PyUnicode_CheckExact(k)) return 0;
    if (k == name) return 1;
    return PyUnicode_GET_LENGTH(k) == PyUnicode_GET_LENGTH(name) && PyUnicode_Compare(k, name) == 0;
}

/* which of names (n of them) the str k equals, -1: none; aliases cache the objects found */
static int name_index(PyObject *k, PyObject **names, PyObject **alias, int n) {
    for (int i = 0; i < n; i++)
        if (k == alias[i]) return i;
    if (!PyUnicode_CheckExact(k)) return -1;
    for (int i = 0; i < n; i++)
        if (is_key(k, names[i])) {
            Py_INCREF(k);
            Py_XSETREF(alias[i], k);
            return i;
        }
    return -1;
}

/* frame object -> its index in frame_objects, by address (the object is kept alive there) */
static int32_t frame_id(M *m, PyObject *f) {
    if (m->fcount * 2 >= m->fcap) {
        size_t cap = m->fcap ? m->fcap * 2 : 4096;
        PyObject **keys = calloc(cap, sizeof(PyObject *));
        int32_t *vals = malloc(cap * sizeof(int32_t));
        if (!keys || !vals) {
            free(keys);
            free(vals);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < m->fcap; i++) {
            if (!m->fkeys[i]) continue;
            size_t h = ((uintptr_t)m->fkeys[i] >> 4) * 0x9E3779B97F4A7C15ull;
            size_t j = h & (cap - 1);
            while (keys[j]) j = (j + 1) & (cap - 1);
            keys[j] = m->fkeys[i];
            vals[j] = m->fvals[i];
        }
        free(m->fkeys);
        free(m->fvals);
        m->fkeys = keys;
        m->fvals = vals;
        m->fcap = cap;
    }
    size_t h = ((uintptr_t)f >> 4) * 0x9E3779B97F4A7C15ull;
    size_t j = h & (m->fcap - 1);
    while (m->fkeys[j]) {
        if (m->fkeys[j] == f) return m->fvals[j];
        j = (j + 1) & (m->fcap - 1);
    }
    int32_t id = (int32_t)PyList_GET_SIZE(m->frame_objects);
    if (PyList_Append(m->frame_objects, f) < 0) return -1;
    m->fkeys[j] = f;
    m->fvals[j] = id;
    m->fcount++;
    return id;
}

static uint64_t hash_ids(const int32_t *ids, size_t n) {
    uint64_t h = 1469598103934665603ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int stab_insert(M *m, int64_t id, uint64_t h) {
    size_t j = h & (m->stab_cap - 1);
    while (m->stab[j] >= 0) j = (j + 1) & (m->stab_cap - 1);
    m->stab[j] = id;
    return 0;
}

/* a frames list -> its stack id (a new one for frames not seen in this order before) */
static int64_t stack_id(M *m, PyObject *list) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n == 0) return -1;
    if ((size_t)n > m->scratch_cap) {
        int32_t *p = realloc(m->scratch, n * sizeof(int32_t));
        if (!p) {
            PyErr_NoMemory();
            return -2;
        }
        m->scratch = p;
        m->scratch_cap = n;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t f = frame_id(m, PyList_GET_ITEM(list, i));
        if (f < 0) return -2;
        m->scratch[i] = f;
    }
    uint64_t h = hash_ids(m->scratch, n);
    if (m->stab_cap) {
        size_t j = h & (m->stab_cap - 1);
        while (m->stab[j] >= 0) {
            int64_t id = m->stab[j];
            if (m->slen[id] == (uint32_t)n &&
                memcmp(m->pool + m->soff[id], m->scratch, n * sizeof(int32_t)) == 0)
                return id;
            j = (j + 1) & (m->stab_cap - 1);
        }
    }
    if (m->scount == m->scap) {
        size_t cap = m->scap ? m->scap * 2 : 1024;
        size_t *o = realloc(m->soff, cap * sizeof(size_t));
        if (!o) {
            PyErr_NoMemory();
            return -2;
        }
        m->soff = o;
        uint32_t *l = realloc(m->slen, cap * sizeof(uint32_t));
        if (!l) {
            PyErr_NoMemory();
            return -2;
        }
        m->slen = l;
        m->scap = cap;
    }
    if (m->pool_len + n > m->pool_cap) {
        size_t cap = m->pool_cap ? m->pool_cap * 2 : 1 << 16;
        while (cap < m->pool_len + n) cap *= 2;
        int32_t *p = realloc(m->pool, cap * sizeof(int32_t));
        if (!p) {
            PyErr_NoMemory();
            return -2;
        }
        m->pool = p;
        m->pool_cap = cap;
    }
    int64_t id = (int64_t)m->scount++;
    m->soff[id] = m->pool_len;
    m->slen[id] = (uint32_t)n;
    memcpy(m->pool + m->pool_len, m->scratch, n * sizeof(int32_t));
    m->pool_len += n;
    if (m->scount * 2 > m->stab_cap) {
        size_t cap = m->stab_cap ? m->stab_cap * 2 : 4096;
        free(m->stab);
        m->stab = malloc(cap * sizeof(int64_t));
        if (!m->stab) {
            PyErr_NoMemory();
            return -2;
        }
        memset(m->stab, 0xff, cap * sizeof(int64_t));
        m->stab_cap = cap;
        for (size_t s = 0; s < m->scount; s++)
            stab_insert(m, (int64_t)s, hash_ids(m->pool + m->soff[s], m->slen[s]));
    } else {
        stab_insert(m, id, h);
    }
    return id;
}

/* an int value for a column: isinstance(v, int) and not bool (exact: type(v) is int) */
static int column_int(PyObject *v, int exact, int64_t *out, int *ok) {
    *ok = 0;
    *out = -1;
    if (!v || !PyLong_Check(v) || PyBool_Check(v)) return 0;
    if (exact && !PyLong_CheckExact(v)) return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) return UNSUPPORTED("an integer beyond 64 bits");
    *out = x;
    *ok = 1;
    return 0;
}

/* one trace entry as a row (as the reference reads the dict: see snapshot.py) */
static int entry_row(M *m, Slot *s, int32_t owner) {
    Entry *e = s->entry;
    uint8_t action = 255;
    PyObject *a = e->action;
    if (a && PyUnicode_CheckExact(a)) {
        int i = name_index(a, m->action_names, m->action_alias, 9);
        if (i >= 0) action = (uint8_t)i;
    } else if (a && PyObject_Hash(a) == -1) {
        return UNSUPPORTED("an unhashable action");
    }
    if (action == 255 && PyList_Append(m->unknown, a ? a : Py_None) < 0) return -1;
    int64_t addr, size, stream, time_us;
    int ok, size_ok;
    if (column_int(e->addr, 0, &addr, &ok) < 0) return -1;
    if (column_int(e->size, 1, &size, &size_ok) < 0) return -1;
    if (column_int(e->stream, 0, &stream, &ok) < 0) return -1;
    if (column_int(e->time_us, 1, &time_us, &ok) < 0) return -1;
    if (!ok) time_us = -1;
    int32_t stack = (int32_t)e->frames;
    uint8_t okb = (uint8_t)size_ok;
    if (buf_put(&m->action, &action, 1) < 0 || buf_put(&m->address, &addr, 8) < 0 ||
        buf_put(&m->size, &size, 8) < 0 || buf_put(&m->size_ok, &okb, 1) < 0 ||
        buf_put(&m->stream, &stream, 8) < 0 || buf_put(&m->time_us, &time_us, 8) < 0 ||
        buf_put(&m->stack_col, &stack, 4) < 0 || buf_put(&m->owner, &owner, 4) < 0)
        return -1;
    m->rows++;
    return 0;
}

/* APPEND / APPENDS of stack[at:] to stack[at - 1] */
static int appends(M *m, size_t at) {
    if (at == 0) return UNSUPPORTED("append without a list");
    Slot *target = &m->stack[at - 1];
    if (!PyList_CheckExact(target->obj)) return UNSUPPORTED("append to what is not a list");
    PyObject *list = target->obj;
    for (size_t i = at; i < m->depth; i++) {
        Slot *s = &m->stack[i];
        PyObject *item = s->obj;
        if (target->kind == ENTRIES && s->kind == ENTRY) {
            if (target->owner < 0) {
                target->owner = (int32_t)PyList_GET_SIZE(m->owners);
                if (PyList_Append(m->owners, list) < 0) return -1;
            }
            if (entry_row(m, s, target->owner) < 0) return -1;
            item = m->sentinel;
        } else if (target->kind == OUTER && s->kind == ENTRIES) {
            /* an entries list in its place */
        } else if (plain(s) < 0) {
            return -1;
        }
        if (PyList_Append(list, item) < 0) return -1;
    }
    drop_to(m, at);
    return 0;
}

/* a frames value of an entry: its stack id (the list interned, its memo slot given the id) */
static int entry_frames(M *m, Slot *v, int64_t *out) {
    *out = -1;
    if (v->kind == STACK) {
        *out = PyLong_AsLongLong(v->obj); /* interned before */
        return 0;
    }
    if (plain(v) < 0) return -1;
    if (!PyList_CheckExact(v->obj) || v->kind != PLAIN) return 0; /* no stack, as the reference */
    int64_t id = stack_id(m, v->obj);
    if (id == -2) return -1;
    *out = id;
    if (id >= 0 && v->memo >= 0 && (size_t)v->memo < m->memo_cap && m->memo[v->memo] == v->obj) {
        PyObject *made = PyLong_FromLongLong(id); /* later references to the list get its id */
        if (!made) return -1;
        Py_SETREF(m->memo[v->memo], made);
        m->memo_flag[v->memo] = M_STACK;
    }
    return 0;
}

/* a key and value set in an entry: kept where a row needs it, else dropped */
static int entry_set(M *m, Entry *e, Slot *k, Slot *v) {
    PyObject **field = NULL;
    if (PyUnicode_CheckExact(k->obj)) {
        /* an "oom" entry carries the device's free memory as "device_free", not "addr" */
        PyObject *names[7] = {m->key_frames, m->key_action, m->key_addr,       m->key_size,
                              m->key_stream, m->key_time,   m->key_device_free};
        PyObject **fields[7] = {NULL,        &e->action,  &e->addr, &e->size,
                                &e->stream, &e->time_us, &e->addr};
        int i = name_index(k->obj, names, m->key_alias, 7);
        if (i == 0) return entry_frames(m, v, &e->frames);
        if (i > 0) field = fields[i];
    } else if (PyObject_Hash(k->obj) == -1) {
        return UNSUPPORTED("a key that cannot be one");
    }
    if (plain(v) < 0) return -1;
    if (field) {
        Py_INCREF(v->obj);
        Py_XSETREF(*field, v->obj);
    }
    return 0;
}

/* SETITEM / SETITEMS of stack[at:] pairs into stack[at - 1] */
static int setitems(M *m, size_t at) {
    if (at == 0 || (m->depth - at) % 2) return UNSUPPORTED("setitems without a dict");
    Slot *target = &m->stack[at - 1];
    if (target->kind != ENTRY && !PyDict_CheckExact(target->obj))
        return UNSUPPORTED("setitem on what is not a dict");
    for (size_t i = at; i < m->depth; i += 2) {
        Slot *k = &m->stack[i], *v = &m->stack[i + 1];
        if (plain(k) < 0) return -1;
        if (target->kind == ENTRY) {
            if (entry_set(m, target->entry, k, v) < 0) return -1;
            continue;
        }
        if (plain(v) < 0) return -1;
        if (PyDict_SetItem(target->obj, k->obj, v->obj) < 0)
            return UNSUPPORTED("a key that cannot be one");
    }
    drop_to(m, at);
    return 0;
}

static int tuple_of(M *m, size_t at) {
    PyObject *t = PyTuple_New((Py_ssize_t)(m->depth - at));
    if (!t) return -1;
    for (size_t i = at; i < m->depth; i++) {
        if (plain(&m->stack[i]) < 0) {
            Py_DECREF(t);
            return -1;
        }
        Py_INCREF(m->stack[i].obj);
        PyTuple_SET_ITEM(t, (Py_ssize_t)(i - at), m->stack[i].obj);
    }
    drop_to(m, at);
    return push(m, t, PLAIN);
}

/* the kind of a list or dict pushed now, from what is below it on the stack */
static uint8_t new_kind(M *m, int is_list) {
    if (!m->depth) return PLAIN;
    Slot *top = &m->stack[m->depth - 1];
    size_t b = base(m);
    Slot *below_mark = b > 0 ? &m->stack[b - 1] : NULL;
    if (is_list) {
        if (top->kind == OUTER) return ENTRIES; /* a device's list of entries */
        if (top->kind == ENTRIES && below_mark && below_mark->kind == OUTER && b < m->depth)
            return ENTRIES; /* the next device's, in one APPENDS with the first */
        if (is_key(top->obj, m->key_device_traces)) return OUTER;
        return PLAIN;
    }
    if (top->kind == ENTRIES) return ENTRY; /* the first entry (of a batch) */
    if (top->kind == ENTRY && below_mark && below_mark->kind == ENTRIES && b < m->depth)
        return ENTRY; /* the next entry of a batch */
    return PLAIN;
}

static int refuse_global(const char *module, size_t mn, const char *name, size_t nn) {
    PyObject *m = PyUnicode_DecodeUTF8(module, (Py_ssize_t)(mn > 200 ? 200 : mn), "replace");
    PyObject *n = PyUnicode_DecodeUTF8(name, (Py_ssize_t)(nn > 200 ? 200 : nn), "replace");
    if (m && n) PyErr_Format(RefusedError, "it names the global %U.%U", m, n);
    Py_XDECREF(m);
    Py_XDECREF(n);
    return -1;
}

static inline uint64_t le(const unsigned char *p, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}

static PyObject *long_le(const unsigned char *p, size_t n) {
    if (n == 0) return PyLong_FromLong(0);
    if (n <= 8) {
        uint64_t x = le(p, (int)n);
        if (n < 8 && (p[n - 1] & 0x80)) x |= ~(uint64_t)0 << (8 * n);
        return PyLong_FromLongLong((long long)x);
    }
    return _PyLong_FromByteArray(p, n, 1, 1);
}

static int step(M *m, int *done) {
    if (m->frame_end >= 0) { /* an opcode across a frame's end reads apart in the unpickler */
        int64_t at = (int64_t)(m->base + m->pos);
        if (at > m->frame_end) return UNSUPPORTED("an opcode across a frame's end");
        if (at == m->frame_end) m->frame_end = -1;
    }
    if (need(m, 1) < 0) return -1;
    unsigned char op = (unsigned char)m->buf[m->pos++];
    const unsigned char *p;
    size_t n, at;
    switch (op) {
    case 0x80: /* PROTO */
        if (need(m, 1) < 0) return -1;
        if ((unsigned char)m->buf[m->pos++] > 5) return UNSUPPORTED("an unknown protocol");
        return 0;
    case 0x95: /* FRAME: its bytes must all be there, as the unpickler reads them at once */
        if (need(m, 8) < 0) return -1;
        n = (size_t)le((const unsigned char *)m->buf + m->pos, 8);
        m->pos += 8;
        if (n > ((size_t)16 << 20) || m->frame_end >= 0) return UNSUPPORTED("a frame");
        if (need(m, n) < 0) return -1;
        m->frame_end = (int64_t)(m->base + m->pos + n);
        return 0;
    case '.': /* STOP */
        if (m->depth != 1 || m->nmarks) return UNSUPPORTED("STOP with more than a result");
        if (plain(&m->stack[0]) < 0) return -1;
        *done = 1;
        return 0;
    case '(':
        if (m->nmarks == m->marks_cap) {
            size_t cap = m->marks_cap ? m->marks_cap * 2 : 64;
            size_t *k = realloc(m->marks, cap * sizeof(size_t));
            if (!k) {
                PyErr_NoMemory();
                return -1;
            }
            m->marks = k;
            m->marks_cap = cap;
        }
        m->marks[m->nmarks++] = m->depth;
        return 0;
    case '0': /* POP */
        if (m->depth == base(m)) return UNSUPPORTED("POP of a mark");
        drop_to(m, m->depth - 1);
        return 0;
    case '1': /* POP_MARK */
        if (pop_mark(m, &at) < 0) return -1;
        drop_to(m, at);
        return 0;
    case '2': /* DUP */
        if (!m->depth || plain(&m->stack[m->depth - 1]) < 0) return UNSUPPORTED("DUP");
        Py_INCREF(m->stack[m->depth - 1].obj);
        return push(m, m->stack[m->depth - 1].obj, PLAIN);
    case 'N':
        Py_INCREF(Py_None);
        return push(m, Py_None, PLAIN);
    case 0x88:
        Py_INCREF(Py_True);
        return push(m, Py_True, PLAIN);
    case 0x89:
        Py_INCREF(Py_False);
        return push(m, Py_False, PLAIN);
    case 'J':
        if (need(m, 4) < 0) return -1;
        p = (const unsigned char *)m->buf + m->pos;
        m->pos += 4;
        return push(m, PyLong_FromLong((int32_t)(uint32_t)le(p, 4)), PLAIN);
    case 'K':
        if (need(m, 1) < 0) return -1;
        return push(m, PyLong_FromLong((unsigned char)m->buf[m->pos++]), PLAIN);
    case 'M':
        if (need(m, 2) < 0) return -1;
        p = (const unsigned char *)m->buf + m->pos;
        m->pos += 2;
        return push(m, PyLong_FromLong((long)le(p, 2)), PLAIN);
    case 0x8a: /* LONG1 */
    case 0x8b: /* LONG4 */
        if (need(m, op == 0x8a ? 1 : 4) < 0) return -1;
        p = (const unsigned char *)m->buf + m->pos;
        n = op == 0x8a ? p[0] : (size_t)le(p, 4);
        if (op == 0x8b && (p[3] & 0x80)) return UNSUPPORTED("LONG4 of negative size");
        m->pos += op == 0x8a ? 1 : 4;
        if (need(m, n) < 0) return -1;
        p = (const unsigned char *)m->buf + m->pos;
        m->pos += n;
        return push(m, long_le(p, n), PLAIN);
    case 'G': {
        if (need(m, 8) < 0) return -1;
        double x = PyFloat_Unpack8(m->buf + m->pos, 0);
        m->pos += 8;
        if (x == -1.0 && PyErr_Occurred()) return -1;
        return push(m, PyFloat_FromDouble(x), PLAIN);
    }
    case 0x8c: /* SHORT_BINUNICODE */
    case 'X':  /* BINUNICODE */
    case 0x8d: /* BINUNICODE8 */
    case 'C':  /* SHORT_BINBYTES */
    case 'B':  /* BINBYTES */
    case 0x8e: /* BINBYTES8 */ {
        int width = (op == 0x8c || op == 'C') ? 1 : (op == 'X' || op == 'B') ? 4 : 8;
        if (need(m, width) < 0) return -1;
        n = (size_t)le((const unsigned char *)m->buf + m->pos, width);
        m->pos += width;
        if (n > ((size_t)1 << 40)) return UNSUPPORTED("a string too large");
        if (need(m, n) < 0) return -1;
        const char *s = m->buf + m->pos;
        m->pos += n;
        int text = op == 0x8c || op == 'X' || op == 0x8d;
        PyObject *o = text ? PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "surrogatepass")
                           : PyBytes_FromStringAndSize(s, (Py_ssize_t)n);
        if (!o) return UNSUPPORTED("a string that is not UTF-8");
        return push(m, o, PLAIN);
    }
    case '}': {
        uint8_t kind = new_kind(m, 0);
        if (kind != ENTRY) return push(m, PyDict_New(), kind);
        Entry *e = calloc(1, sizeof(Entry));
        if (!e) {
            PyErr_NoMemory();
            return -1;
        }
        e->frames = -1;
        Py_INCREF(Py_None);
        if (push(m, Py_None, ENTRY) < 0) {
            free(e);
            return -1;
        }
        m->stack[m->depth - 1].entry = e;
        return 0;
    }
    case ']': {
        uint8_t kind = new_kind(m, 1);
        return push(m, PyList_New(0), kind);
    }
    case ')':
        return push(m, PyTuple_New(0), PLAIN);
    case 't':
        if (pop_mark(m, &at) < 0) return -1;
        return tuple_of(m, at);
    case 0x85:
    case 0x86:
    case 0x87:
        n = (size_t)(op - 0x84);
        if (m->depth < base(m) + n) return UNSUPPORTED("TUPLE of too few");
        return tuple_of(m, m->depth - n);
    case 'l':
    case 'd': {
        if (pop_mark(m, &at) < 0) return -1;
        PyObject *o = op == 'l' ? PyList_New(0) : PyDict_New();
        if (push(m, o, PLAIN) < 0) return -1;
        /* move it below its items, then append / set them */
        Slot made = m->stack[m->depth - 1];
        memmove(&m->stack[at + 1], &m->stack[at], (m->depth - 1 - at) * sizeof(Slot));
        m->stack[at] = made;
        return op == 'l' ? appends(m, at + 1) : setitems(m, at + 1);
    }
    case 'a':
        if (m->depth < base(m) + 1 || m->depth < 2) return UNSUPPORTED("APPEND");
        return appends(m, m->depth - 1);
    case 'e':
        if (pop_mark(m, &at) < 0) return -1;
        return appends(m, at);
    case 's':
        if (m->depth < base(m) + 2 || m->depth < 3) return UNSUPPORTED("SETITEM");
        return setitems(m, m->depth - 2);
    case 'u':
        if (pop_mark(m, &at) < 0) return -1;
        return setitems(m, at);
    case 0x94: /* MEMOIZE */
        return memo_put(m, m->memo_len);
    case 'q':
        if (need(m, 1) < 0) return -1;
        return memo_put(m, (unsigned char)m->buf[m->pos++]);
    case 'r':
        if (need(m, 4) < 0) return -1;
        n = (size_t)le((const unsigned char *)m->buf + m->pos, 4);
        m->pos += 4;
        return memo_put(m, n);
    case 'h':
        if (need(m, 1) < 0) return -1;
        return memo_get(m, (unsigned char)m->buf[m->pos++]);
    case 'j':
        if (need(m, 4) < 0) return -1;
        n = (size_t)le((const unsigned char *)m->buf + m->pos, 4);
        m->pos += 4;
        return memo_get(m, n);
    case 'c': /* GLOBAL */
    case 'i': /* INST */ {
        const char *a, *b;
        size_t an, bn;
        if (line(m, &a, &an) < 0) return -1;
        /* the second line may move the buffer: copy the first */
        char module[256];
        size_t keep = an < sizeof module ? an : sizeof module;
        memcpy(module, a, keep);
        if (line(m, &b, &bn) < 0) return -1;
        return refuse_global(module, keep, b, bn);
    }
    case 0x93: { /* STACK_GLOBAL */
        if (m->depth < 2) return UNSUPPORTED("STACK_GLOBAL");
        PyObject *mod = m->stack[m->depth - 2].obj, *name = m->stack[m->depth - 1].obj;
        if (!PyUnicode_Check(mod) || !PyUnicode_Check(name))
            return UNSUPPORTED("STACK_GLOBAL of what is not text");
        PyErr_Format(RefusedError, "it names the global %.200U.%.200U", mod, name);
        return -1;
    }
    case 'P':
    case 'Q':
        PyErr_SetString(RefusedError, "it holds a persistent id");
        return -1;
    default:
        return UNSUPPORTED("an opcode this scanner does not follow");
    }
}

static PyObject *column(Buf *b) {
    PyObject *o = PyByteArray_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    return o;
}

static void release(M *m) {
    drop_to(m, 0);
    for (size_t i = 0; i < m->memo_cap; i++) Py_XDECREF(m->memo[i]);
    free(m->memo);
    free(m->memo_flag);
    free(m->stack);
    free(m->marks);
    free(m->buf);
    Buf *bufs[] = {&m->action, &m->address, &m->size, &m->size_ok,
                   &m->stream, &m->time_us, &m->stack_col, &m->owner};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->data);
    free(m->fkeys);
    free(m->fvals);
    free(m->pool);
    free(m->soff);
    free(m->slen);
    free(m->stab);
    free(m->scratch);
    Py_XDECREF(m->owners);
    Py_XDECREF(m->frame_objects);
    Py_XDECREF(m->stacks);
    Py_XDECREF(m->unknown);
    Py_XDECREF(m->key_frames);
    Py_XDECREF(m->key_action);
    Py_XDECREF(m->key_addr);
    Py_XDECREF(m->key_device_free);
    Py_XDECREF(m->key_size);
    Py_XDECREF(m->key_stream);
    Py_XDECREF(m->key_time);
    Py_XDECREF(m->key_device_traces);
    for (int i = 0; i < 9; i++) Py_XDECREF(m->action_names[i]);
    for (int i = 0; i < 9; i++) Py_XDECREF(m->action_alias[i]);
    for (int i = 0; i < 7; i++) Py_XDECREF(m->key_alias[i]);
}

static const char *ACTIONS[9] = {"alloc",         "free_requested", "free_completed",
                                 "segment_alloc", "segment_free",   "segment_map",
                                 "segment_unmap", "oom",            "snapshot"};

static PyObject *scan(PyObject *self, PyObject *args) {
    M m;
    memset(&m, 0, sizeof m);
    if (!PyArg_ParseTuple(args, "OO", &m.read, &m.sentinel)) return NULL;
    m.cap = CHUNK;
    m.buf = malloc(m.cap);
    m.frame_end = -1;
    m.owners = PyList_New(0);
    m.frame_objects = PyList_New(0);
    m.stacks = PyList_New(0);
    m.unknown = PyList_New(0);
    m.key_frames = PyUnicode_InternFromString("frames");
    m.key_action = PyUnicode_InternFromString("action");
    m.key_addr = PyUnicode_InternFromString("addr");
    m.key_device_free = PyUnicode_InternFromString("device_free");
    m.key_size = PyUnicode_InternFromString("size");
    m.key_stream = PyUnicode_InternFromString("stream");
    m.key_time = PyUnicode_InternFromString("time_us");
    m.key_device_traces = PyUnicode_InternFromString("device_traces");
    int ready = m.buf && m.owners && m.frame_objects && m.stacks && m.unknown && m.key_frames &&
                m.key_action && m.key_addr && m.key_device_free && m.key_size && m.key_stream && m.key_time &&
                m.key_device_traces;
    for (int i = 0; i < 9; i++) {
        m.action_names[i] = PyUnicode_InternFromString(ACTIONS[i]);
        ready = ready && m.action_names[i];
    }
    if (!ready) {
        release(&m);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    int done = 0;
    while (!done)
        if (step(&m, &done) < 0) {
            release(&m);
            return NULL;
        }
    PyObject *document = m.stack[0].obj;
    Py_INCREF(document);
    /* the memo holds nothing the result needs beyond the document: let it go first */
    drop_to(&m, 0);
    for (size_t i = 0; i < m.memo_cap; i++) Py_CLEAR(m.memo[i]);
    for (size_t s = 0; s < m.scount; s++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)(m.pool + m.soff[s]),
                                                (Py_ssize_t)m.slen[s] * 4);
        if (!b || PyList_Append(m.stacks, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(document);
            release(&m);
            return NULL;
        }
        Py_DECREF(b);
    }
    PyObject *columns = PyDict_New();
    struct {
        const char *name;
        Buf *b;
    } named[] = {{"action", &m.action},   {"address", &m.address},   {"size", &m.size},
                 {"size_ok", &m.size_ok}, {"stream", &m.stream},     {"time_us", &m.time_us},
                 {"stack", &m.stack_col}, {"owner", &m.owner}};
    for (size_t i = 0; columns && i < sizeof named / sizeof *named; i++) {
        PyObject *c = column(named[i].b);
        if (!c || PyDict_SetItemString(columns, named[i].name, c) < 0) Py_CLEAR(columns);
        Py_XDECREF(c);
    }
    PyObject *result = columns ? Py_BuildValue("(NNOOOO)", document, columns, m.owners,
                                               m.frame_objects, m.stacks, m.unknown)
                               : NULL;
    if (!columns) Py_DECREF(document);
    release(&m);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Walk a snapshot pickle: see _snapscan.c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_snapscan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__snapscan(void) {
    PyObject *mod = PyModule_Create(&module);
    if (!mod) return NULL;
    RefusedError = PyErr_NewException("gpuscope.readers._snapscan.RefusedError", NULL, NULL);
    UnsupportedError = PyErr_NewException("gpuscope.readers._snapscan.UnsupportedError", NULL, NULL);
    TruncatedError = PyErr_NewException("gpuscope.readers._snapscan.TruncatedError", NULL, NULL);
    if (!RefusedError || !UnsupportedError || !TruncatedError ||
        PyModule_AddObjectRef(mod, "RefusedError", RefusedError) < 0 ||
        PyModule_AddObjectRef(mod, "UnsupportedError", UnsupportedError) < 0 ||
        PyModule_AddObjectRef(mod, "TruncatedError", TruncatedError) < 0 ||
        PyModule_AddIntConstant(mod, "VERSION", SNAPSCAN_VERSION) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
