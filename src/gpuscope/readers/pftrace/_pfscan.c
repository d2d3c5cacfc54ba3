/* .pftrace wire walker: a Perfetto Trace's slices and GPU render stages straight into columns.
 *
 * Contract (the Python side is gpuscope/readers/pftrace/_columns.py, which turns the columns into
 * the same rows as the protobuf reader in _decode.py, its pure-Python twin):
 *
 *   scan(data: bytes, wanted: tuple[bytes, ...], ids: tuple[bytes, ...])
 *       -> (marks, slices, stages, others, launched, keys)
 *
 * walks the protobuf wire format of ``data`` (a ``Trace``, already un-gzipped) once, reading only
 * the fields of schema.py that the reader uses, and skipping every other field by its wire type.
 *
 * marks     bytes of int64 rows (packet index, timestamp, type, track uuid), one per TracePacket
 *           holding a ``track_event`` (file order): the begins and ends to pair.
 * slices    bytes of int64 rows of EVENT_COLUMNS values, one per slice begin (type 1, in file
 *           order): see the E_* indices below. Strings (a slice's name, its first category) are
 *           (offset, length) in ``data``, -1 when absent.
 * stages    bytes of int64 rows of STAGE_COLUMNS values, one per ``gpu_render_stage_event``.
 * others    bytes of int64 rows (packet index, offset, length): every other packet (clock,
 *           tracks, interned data, counters, packets without data), for protobuf to decode.
 * launched  bytes of int64: the render-stage event ids each launch names (TrackEvent field 3000),
 *           one after another; an event row's E_LAUNCHED_AT and E_LAUNCHED say where its are.
 * keys      list of bytes: the debug annotations of a slice whose names are in ``wanted``, other
 *           than the integer ids named in ``ids``, as ``TrackEvent.debug_annotations`` fields
 *           (field 4 records), each distinct set once; an event row's E_KEY indexes it (-1: none).
 *           The ids (int_value, or uint_value below 2^63) are columns E_ID0.. with a bit each in
 *           E_ID_MASK. A slice whose id annotation has another type or comes twice is "complex"
 *           (E_FLAGS bit F_COMPLEX): all its wanted annotations go to its key, ids included.
 *
 * Anything this walker does not follow (a group wire type, a packet with two data fields, a
 * truncated varint or a length past the end, nesting deeper than MAX_DEPTH) raises ValueError
 * naming it: the caller then decodes the file with protobuf, which reads it or says it is
 * malformed, so results never depend on which path ran. Nothing returned points into ``data``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Raised whenever what scan takes or returns changes (gpuscope.readers.pftrace._columns). */
#define PFSCAN_VERSION 1
#define MAX_DEPTH 32
#define MAX_IDS 8
#define MAX_WANTED 64

enum {
    E_SEQ, E_TIME, E_TYPE, E_UUID, E_NAME_IID, E_NAME_AT, E_NAME_LEN, E_FLAGS, E_CAT_IID,
    E_CAT_AT, E_CAT_LEN, E_FLOW, E_LAUNCHED_AT, E_LAUNCHED, E_KEY, E_ID_MASK, E_ID0,
    EVENT_COLUMNS = E_ID0 + MAX_IDS
};
enum { F_CAT_IID = 1, F_CAT_TEXT = 2, F_LAUNCH = 4, F_FLOW = 8, F_COMPLEX = 16 };
enum {
    S_SEQ, S_TIME, S_EVENT_ID, S_DURATION, S_GPU, S_QUEUE_IID, S_STAGE_IID, S_KERNEL_IID,
    S_NAME_IID, S_NAME_AT, S_NAME_LEN, S_HAS_LAUNCH, S_GX, S_GY, S_GZ, S_BX, S_BY, S_BZ,
    S_BYTES_AT, S_BYTES_LEN, STAGE_COLUMNS
};

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Column;

typedef struct {
    const uint8_t *base;
    const char *why; /* set when declining */
    Column marks, events, stages, others, launched;
    /* the wanted annotation names and which of them are ids */
    const char *wanted[MAX_WANTED];
    Py_ssize_t wanted_len[MAX_WANTED];
    int wanted_id[MAX_WANTED]; /* index among ids, -1 for a plain wanted name */
    int n_wanted;
    /* the current slice's wanted annotations */
    struct Note {
        const uint8_t *at;
        Py_ssize_t len;
        int id;
        int simple;
        int64_t value;
    } *notes;
    Py_ssize_t n_notes, cap_notes;
    uint8_t *key;
    Py_ssize_t key_len, key_cap;
    PyObject *key_ids; /* dict bytes -> int */
    PyObject *keys;    /* list */
} Walk;

static int grow(Column *c, Py_ssize_t more) {
    if (c->n + more <= c->cap) return 0;
    Py_ssize_t cap = c->cap ? c->cap * 2 : 4096;
    while (cap < c->n + more) cap *= 2;
    int64_t *v = PyMem_Realloc(c->v, (size_t)cap * sizeof(int64_t));
    if (v == NULL) return -1;
    c->v = v;
    c->cap = cap;
    return 0;
}

/* ---- the wire format ----------------------------------------------------------------------- */

/* The varint at *p (at most 10 bytes, as protobuf reads them); 0 when it runs past end. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t value = 0;
    const uint8_t *at = *p;
    for (int shift = 0; shift < 70; shift += 7) {
        if (at >= end) return 0;
        uint8_t byte = *at++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *p = at;
            *out = value;
            return 1;
        }
    }
    return 0;
}

#define DECLINE(w, text) do { (w)->why = (text); return -1; } while (0)

/* One field's tag; 0 at the end of the message, -1 (declined) on a bad tag. */
static int tag(Walk *w, const uint8_t **p, const uint8_t *end, uint32_t *number, int *wire) {
    uint64_t t;
    if (*p >= end) return 0;
    if (!varint(p, end, &t)) DECLINE(w, "a truncated field tag");
    *number = (uint32_t)(t >> 3);
    *wire = (int)(t & 7);
    if (*number == 0 || t >> 3 > 0x1FFFFFFF) DECLINE(w, "field number 0 or out of range");
    if (*wire == 3 || *wire == 4) DECLINE(w, "a group (wire type 3 or 4)");
    if (*wire > 5) DECLINE(w, "an invalid wire type");
    return 1;
}

/* A length-delimited field's content: [*at, *at + *len). */
static int span(Walk *w, const uint8_t **p, const uint8_t *end, const uint8_t **at,
                Py_ssize_t *len) {
    uint64_t n;
    if (!varint(p, end, &n)) DECLINE(w, "a truncated length");
    if (n > (uint64_t)(end - *p)) DECLINE(w, "a length past the end");
    *at = *p;
    *len = (Py_ssize_t)n;
    *p += n;
    return 0;
}

/* Skips one field's value of wire type ``wire``; the scalar of a varint or fixed field in *value. */
static int skip(Walk *w, const uint8_t **p, const uint8_t *end, int wire, uint64_t *value) {
    const uint8_t *at;
    Py_ssize_t len;
    uint64_t v = 0;
    switch (wire) {
    case 0:
        if (!varint(p, end, &v)) DECLINE(w, "a truncated varint");
        break;
    case 1:
        if (end - *p < 8) DECLINE(w, "a truncated fixed64");
        memcpy(&v, *p, 8); /* little-endian hosts only (x86, ARM) */
        *p += 8;
        break;
    case 5:
        if (end - *p < 4) DECLINE(w, "a truncated fixed32");
        *p += 4;
        break;
    default:
        return span(w, p, end, &at, &len);
    }
    if (value) *value = v;
    return 0;
}

/* The values of a repeated varint field: one (wire 0) or packed (wire 2). Calls back each. */
typedef void (*each_fn)(void *, uint64_t);

static int repeated_varint(Walk *w, const uint8_t **p, const uint8_t *end, int wire, each_fn each,
                           void *ctx) {
    uint64_t v;
    if (wire == 0) {
        if (!varint(p, end, &v)) DECLINE(w, "a truncated varint");
        if (each) each(ctx, v);
        return 0;
    }
    if (wire != 2) return skip(w, p, end, wire, NULL);
    const uint8_t *at;
    Py_ssize_t len;
    if (span(w, p, end, &at, &len) < 0) return -1;
    const uint8_t *stop = at + len;
    while (at < stop) {
        if (!varint(&at, stop, &v)) DECLINE(w, "a truncated packed varint");
        if (each) each(ctx, v);
    }
    return 0;
}

/* ---- messages ------------------------------------------------------------------------------- */

/* A DebugAnnotation: validated to MAX_DEPTH; its name, last value field and that value. */
typedef struct {
    const uint8_t *name;
    Py_ssize_t name_len;
    int which; /* the value field number set last (0: none) */
    uint64_t value;
} Annotation;

static int annotation(Walk *w, const uint8_t *p, const uint8_t *end, int depth, Annotation *a) {
    uint32_t number;
    int wire, more;
    if (depth > MAX_DEPTH) DECLINE(w, "debug annotations nested too deep");
    while ((more = tag(w, &p, end, &number, &wire)) > 0) {
        const uint8_t *at;
        Py_ssize_t len;
        uint64_t v = 0;
        if (wire == 2 && (number == 11 || number == 12)) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            Annotation inner = {0};
            if (annotation(w, at, at + len, depth + 1, &inner) < 0) return -1;
        } else if (wire == 2 && number == 10) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            if (a) { a->name = at; a->name_len = len; }
        } else {
            if (skip(w, &p, end, wire, &v) < 0) return -1;
            int value_field = ((number >= 2 && number <= 4) && wire == 0) ||
                              (number == 5 && wire == 1) ||
                              ((number == 6 || number == 9) && wire == 2);
            if (value_field && a) { a->which = (int)number; a->value = v; }
        }
    }
    return more;
}

typedef struct {
    int64_t *row;
    Column *launched;
    int failed;
} EventCtx;

static void first_category(void *ctx, uint64_t v) {
    int64_t *row = ((EventCtx *)ctx)->row;
    if (!(row[E_FLAGS] & F_CAT_IID)) {
        row[E_FLAGS] |= F_CAT_IID;
        row[E_CAT_IID] = (int64_t)v;
    }
}

static void launched_id(void *ctx, uint64_t v) {
    EventCtx *e = ctx;
    if (grow(e->launched, 1) < 0) { e->failed = 1; return; }
    e->launched->v[e->launched->n++] = (int64_t)v;
    e->row[E_LAUNCHED]++;
}

static void ignore(void *ctx, uint64_t v) { (void)ctx; (void)v; }

static int note(Walk *w, const uint8_t *at, Py_ssize_t len, const Annotation *a) {
    int found = -1;
    if (a->name == NULL) return 0;
    for (int i = 0; i < w->n_wanted; i++) {
        if (w->wanted_len[i] == a->name_len && memcmp(w->wanted[i], a->name, (size_t)a->name_len) == 0) {
            found = i;
            break;
        }
    }
    if (found < 0) return 0;
    if (w->n_notes == w->cap_notes) {
        Py_ssize_t cap = w->cap_notes ? w->cap_notes * 2 : 32;
        struct Note *notes = PyMem_Realloc(w->notes, (size_t)cap * sizeof(struct Note));
        if (notes == NULL) { PyErr_NoMemory(); return -2; }
        w->notes = notes;
        w->cap_notes = cap;
    }
    struct Note *n = &w->notes[w->n_notes++];
    n->at = at;
    n->len = len;
    n->id = w->wanted_id[found];
    n->simple = a->which == 4 || (a->which == 3 && a->value < ((uint64_t)1 << 63));
    n->value = (int64_t)a->value;
    return 0;
}

static int key_append(Walk *w, const struct Note *n) {
    Py_ssize_t need = w->key_len + n->len + 11;
    if (need > w->key_cap) {
        Py_ssize_t cap = w->key_cap ? w->key_cap * 2 : 1024;
        while (cap < need) cap *= 2;
        uint8_t *key = PyMem_Realloc(w->key, (size_t)cap);
        if (key == NULL) { PyErr_NoMemory(); return -1; }
        w->key = key;
        w->key_cap = cap;
    }
    w->key[w->key_len++] = 0x22; /* field 4, length-delimited */
    uint64_t len = (uint64_t)n->len;
    do {
        uint8_t byte = len & 0x7F;
        len >>= 7;
        w->key[w->key_len++] = byte | (len ? 0x80 : 0);
    } while (len);
    memcpy(w->key + w->key_len, n->at, (size_t)n->len);
    w->key_len += n->len;
    return 0;
}

/* The slice's annotations: ids as columns, the rest as its key. -1 on a Python error. */
static int settle_notes(Walk *w, int64_t *row) {
    int complex = 0, seen = 0;
    for (Py_ssize_t i = 0; i < w->n_notes; i++) {
        struct Note *n = &w->notes[i];
        if (n->id < 0) continue;
        if (!n->simple || (seen & (1 << n->id))) complex = 1;
        seen |= 1 << n->id;
    }
    w->key_len = 0;
    for (Py_ssize_t i = 0; i < w->n_notes; i++) {
        struct Note *n = &w->notes[i];
        if (n->id >= 0 && !complex) {
            row[E_ID_MASK] |= 1 << n->id;
            row[E_ID0 + n->id] = n->value;
        } else if (key_append(w, n) < 0) {
            return -1;
        }
    }
    if (complex) row[E_FLAGS] |= F_COMPLEX;
    if (w->key_len == 0) return 0;
    PyObject *key = PyBytes_FromStringAndSize((const char *)w->key, w->key_len);
    if (key == NULL) return -1;
    PyObject *id = PyDict_GetItemWithError(w->key_ids, key);
    if (id == NULL) {
        if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
        id = PyLong_FromSsize_t(PyList_GET_SIZE(w->keys));
        if (id == NULL || PyDict_SetItem(w->key_ids, key, id) < 0 || PyList_Append(w->keys, key) < 0) {
            Py_XDECREF(id);
            Py_DECREF(key);
            return -1;
        }
        Py_DECREF(id); /* the dict holds it */
    }
    row[E_KEY] = PyLong_AsLongLong(id);
    Py_DECREF(key);
    return 0;
}

/* Returns -1 declined (w->why set), -2 on a Python error. */
static int track_event(Walk *w, const uint8_t *p, const uint8_t *end, int64_t *row) {
    uint32_t number;
    int wire, more;
    EventCtx ctx = {row, &w->launched, 0};
    w->n_notes = 0;
    while ((more = tag(w, &p, end, &number, &wire)) > 0) {
        const uint8_t *at;
        Py_ssize_t len;
        uint64_t v = 0;
        if (number == 3) {
            if (repeated_varint(w, &p, end, wire, first_category, &ctx) < 0) return -1;
        } else if (number == 4 && wire == 2) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            Annotation a = {0};
            if (annotation(w, at, at + len, 1, &a) < 0) return -1;
            int r = note(w, at, len, &a);
            if (r < 0) return r;
        } else if ((number == 22 || number == 23) && wire == 2) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            if (number == 23) {
                row[E_NAME_AT] = at - w->base;
                row[E_NAME_LEN] = len;
            } else if (!(row[E_FLAGS] & F_CAT_TEXT)) {
                row[E_FLAGS] |= F_CAT_TEXT;
                row[E_CAT_AT] = at - w->base;
                row[E_CAT_LEN] = len;
            }
        } else if (number == 47 && wire == 2) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            if (len % 8) DECLINE(w, "packed fixed64 flow ids of a length not a multiple of 8");
            if (len && !(row[E_FLAGS] & F_FLOW)) {
                row[E_FLAGS] |= F_FLOW;
                memcpy(&row[E_FLOW], at, 8);
            }
        } else if (number == 3000 && wire == 2) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            if (!(row[E_FLAGS] & F_LAUNCH)) {
                row[E_FLAGS] |= F_LAUNCH;
                row[E_LAUNCHED_AT] = w->launched.n;
            }
            const uint8_t *q = at, *stop = at + len;
            while ((more = tag(w, &q, stop, &number, &wire)) > 0) {
                if (number == 1) {
                    if (repeated_varint(w, &q, stop, wire, launched_id, &ctx) < 0) return -1;
                    if (ctx.failed) { PyErr_NoMemory(); return -2; }
                } else if (skip(w, &q, stop, wire, NULL) < 0) {
                    return -1;
                }
            }
            if (more < 0) return -1;
        } else {
            if (skip(w, &p, end, wire, &v) < 0) return -1;
            if (wire == 0 && number == 9) row[E_TYPE] = (int32_t)(uint32_t)v;
            else if (wire == 0 && number == 10) row[E_NAME_IID] = (int64_t)v;
            else if (wire == 0 && number == 11) row[E_UUID] = (int64_t)v;
            else if (wire == 1 && number == 47 && !(row[E_FLAGS] & F_FLOW)) {
                row[E_FLAGS] |= F_FLOW;
                row[E_FLOW] = (int64_t)v;
            }
        }
    }
    if (more < 0) return -1;
    return settle_notes(w, row) < 0 ? -2 : 0;
}

static int dim3(Walk *w, const uint8_t *p, const uint8_t *end, int64_t *xyz) {
    uint32_t number;
    int wire, more;
    while ((more = tag(w, &p, end, &number, &wire)) > 0) {
        uint64_t v = 0;
        if (skip(w, &p, end, wire, &v) < 0) return -1;
        if (wire == 0 && number >= 1 && number <= 3) xyz[number - 1] = (uint32_t)v;
    }
    return more;
}

static int render_stage(Walk *w, const uint8_t *p, const uint8_t *end, int64_t *row) {
    uint32_t number;
    int wire, more;
    while ((more = tag(w, &p, end, &number, &wire)) > 0) {
        const uint8_t *at;
        Py_ssize_t len;
        uint64_t v = 0;
        if (wire == 2 && number == 6) { /* ExtraData: name 1, value 2 */
            if (span(w, &p, end, &at, &len) < 0) return -1;
            const uint8_t *q = at, *stop = at + len, *name = NULL, *value = NULL;
            Py_ssize_t name_len = 0, value_len = 0;
            int inner;
            while ((inner = tag(w, &q, stop, &number, &wire)) > 0) {
                if (wire == 2 && (number == 1 || number == 2)) {
                    const uint8_t *s;
                    Py_ssize_t n;
                    if (span(w, &q, stop, &s, &n) < 0) return -1;
                    if (number == 1) { name = s; name_len = n; }
                    else { value = s; value_len = n; }
                } else if (skip(w, &q, stop, wire, NULL) < 0) {
                    return -1;
                }
            }
            if (inner < 0) return -1;
            if (name_len == 5 && memcmp(name, "bytes", 5) == 0) {
                row[S_BYTES_AT] = value ? value - w->base : 0;
                row[S_BYTES_LEN] = value_len;
            }
        } else if (wire == 2 && number == 17) {
            if (span(w, &p, end, &at, &len) < 0) return -1;
            row[S_NAME_AT] = at - w->base;
            row[S_NAME_LEN] = len;
        } else if (number == 18) {
            if (repeated_varint(w, &p, end, wire, ignore, NULL) < 0) return -1;
        } else if (wire == 2 && number == 21) { /* ComputeKernelLaunch: grid 1, block 2 */
            if (span(w, &p, end, &at, &len) < 0) return -1;
            row[S_HAS_LAUNCH] = 1;
            const uint8_t *q = at, *stop = at + len;
            int inner;
            while ((inner = tag(w, &q, stop, &number, &wire)) > 0) {
                if (wire == 2 && (number == 1 || number == 2)) {
                    const uint8_t *s;
                    Py_ssize_t n;
                    if (span(w, &q, stop, &s, &n) < 0) return -1;
                    if (dim3(w, s, s + n, row + (number == 1 ? S_GX : S_BX)) < 0) return -1;
                } else if (skip(w, &q, stop, wire, NULL) < 0) {
                    return -1;
                }
            }
            if (inner < 0) return -1;
        } else {
            if (skip(w, &p, end, wire, &v) < 0) return -1;
            if (wire != 0) continue;
            switch (number) {
            case 1: row[S_EVENT_ID] = (int64_t)v; break;
            case 2: row[S_DURATION] = (int64_t)v; break;
            case 11: row[S_GPU] = (int32_t)(uint32_t)v; break;
            case 13: row[S_QUEUE_IID] = (int64_t)v; break;
            case 14: row[S_STAGE_IID] = (int64_t)v; break;
            case 19: row[S_KERNEL_IID] = (int64_t)v; break;
            case 20: row[S_NAME_IID] = (int64_t)v; break;
            default: break;
            }
        }
    }
    return more;
}

/* One TracePacket. -1 declined, -2 Python error. */
static int packet(Walk *w, int64_t seq, const uint8_t *p, const uint8_t *end) {
    uint32_t number;
    int wire, more, data_fields = 0;
    uint32_t which = 0;
    const uint8_t *data = NULL;
    Py_ssize_t data_len = 0;
    uint64_t timestamp = 0;
    const uint8_t *start = p;
    while ((more = tag(w, &p, end, &number, &wire)) > 0) {
        uint64_t v = 0;
        if (wire == 2 && (number == 6 || number == 11 || number == 12 || number == 52 ||
                          number == 53 || number == 60)) {
            if (span(w, &p, end, &data, &data_len) < 0) return -1;
            which = number;
            data_fields++;
        } else {
            if (skip(w, &p, end, wire, &v) < 0) return -1;
            if (wire == 0 && number == 8) timestamp = v;
        }
    }
    if (more < 0) return -1;
    if (data_fields > 1) DECLINE(w, "a packet with more than one data field");
    if (which == 11) {
        if (grow(&w->events, EVENT_COLUMNS) < 0 || grow(&w->marks, 4) < 0) {
            PyErr_NoMemory();
            return -2;
        }
        int64_t *row = w->events.v + w->events.n;
        memset(row, 0, EVENT_COLUMNS * sizeof(int64_t));
        row[E_SEQ] = seq;
        row[E_TIME] = (int64_t)timestamp;
        row[E_NAME_AT] = row[E_CAT_AT] = row[E_KEY] = -1;
        int r = track_event(w, data, data + data_len, row);
        if (r < 0) return r;
        int64_t *mark = w->marks.v + w->marks.n;
        mark[0] = seq;
        mark[1] = row[E_TIME];
        mark[2] = row[E_TYPE];
        mark[3] = row[E_UUID];
        w->marks.n += 4;
        if (row[E_TYPE] == 1) w->events.n += EVENT_COLUMNS; /* a begin: kept */
    } else if (which == 53) {
        if (grow(&w->stages, STAGE_COLUMNS) < 0) { PyErr_NoMemory(); return -2; }
        int64_t *row = w->stages.v + w->stages.n;
        memset(row, 0, STAGE_COLUMNS * sizeof(int64_t));
        row[S_SEQ] = seq;
        row[S_TIME] = (int64_t)timestamp;
        row[S_NAME_AT] = row[S_BYTES_AT] = -1;
        if (render_stage(w, data, data + data_len, row) < 0) return -1;
        w->stages.n += STAGE_COLUMNS;
    } else {
        if (grow(&w->others, 3) < 0) { PyErr_NoMemory(); return -2; }
        int64_t *row = w->others.v + w->others.n;
        row[0] = seq;
        row[1] = start - w->base;
        row[2] = end - start;
        w->others.n += 3;
    }
    return 0;
}

static PyObject *column_bytes(Column *c) {
    return PyBytes_FromStringAndSize((const char *)c->v, c->n * (Py_ssize_t)sizeof(int64_t));
}

static int names(Walk *w, PyObject *tuple, int id) {
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "names must be a tuple of bytes");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *name = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(name) || w->n_wanted == MAX_WANTED || (id && i >= MAX_IDS)) {
            PyErr_SetString(PyExc_ValueError, "names: bytes, at most 64 (8 ids)");
            return -1;
        }
        w->wanted[w->n_wanted] = PyBytes_AS_STRING(name);
        w->wanted_len[w->n_wanted] = PyBytes_GET_SIZE(name);
        w->wanted_id[w->n_wanted] = id ? (int)i : -1;
        w->n_wanted++;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    PyObject *wanted, *ids, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*OO", &view, &wanted, &ids)) return NULL;
    Walk w;
    memset(&w, 0, sizeof w);
    w.base = view.buf;
    /* ids first: a name both wanted and an id is an id */
    if (names(&w, ids, 1) < 0 || names(&w, wanted, 0) < 0) goto done;
    w.key_ids = PyDict_New();
    w.keys = PyList_New(0);
    if (w.key_ids == NULL || w.keys == NULL) goto done;
    const uint8_t *p = view.buf, *end = p + view.len;
    int64_t seq = 0;
    uint32_t number;
    int wire, more, failed = 0;
    while ((more = tag(&w, &p, end, &number, &wire)) > 0) {
        if (number == 1 && wire == 2) {
            const uint8_t *at;
            Py_ssize_t len;
            if (span(&w, &p, end, &at, &len) < 0) { failed = -1; break; }
            failed = packet(&w, seq++, at, at + len);
            if (failed) break;
        } else if (skip(&w, &p, end, wire, NULL) < 0) {
            failed = -1;
            break;
        }
    }
    if (more < 0) failed = -1;
    if (failed == -1) {
        PyErr_Format(PyExc_ValueError, "not followed: %s", w.why ? w.why : "?");
    } else if (failed == 0) {
        result = Py_BuildValue("(NNNNNO)", column_bytes(&w.marks), column_bytes(&w.events),
                               column_bytes(&w.stages),
                               column_bytes(&w.others), column_bytes(&w.launched), w.keys);
    }
done:
    PyMem_Free(w.marks.v);
    PyMem_Free(w.events.v);
    PyMem_Free(w.stages.v);
    PyMem_Free(w.others.v);
    PyMem_Free(w.launched.v);
    PyMem_Free(w.notes);
    PyMem_Free(w.key);
    Py_XDECREF(w.key_ids);
    Py_XDECREF(w.keys);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS, "A .pftrace's slices and render stages as columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_pfscan", "A .pftrace's slices and render stages as columns.", -1,
    METHODS,
};

PyMODINIT_FUNC PyInit__pfscan(void) {
    PyObject *module = PyModule_Create(&MODULE);
    if (module == NULL) return NULL;
    if (PyModule_AddIntConstant(module, "VERSION", PFSCAN_VERSION) < 0 ||
        PyModule_AddIntConstant(module, "EVENT_COLUMNS", EVENT_COLUMNS) < 0 ||
        PyModule_AddIntConstant(module, "STAGE_COLUMNS", STAGE_COLUMNS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
