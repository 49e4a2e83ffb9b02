/*
 * Optional accelerator for the relay-log reader.
 *
 * 1. constructor(cls, names): build frozen, slotted dataclass instances
 *    without running their __init__ (which assigns each field through
 *    object.__setattr__, ~100 ns a field here). Generic setattr bypasses the
 *    class's frozen __setattr__ and sets the same slots: the same object.
 *
 * 2. fast_transactions(...): decode whole transactions of the common
 *    shapes -- GTID, [BEGIN], [annotate], table maps already known, row
 *    events whose image decoders already exist, XID; or GTID, DML
 *    statements (INSERT, UPDATE, DELETE, REPLACE as the first word), XID --
 *    and append
 *    exactly the events the Python loop in decoder.py would append, built
 *    with the same constructors and the same generated image decoders. On
 *    anything else (a new table, DDL, a partial transaction, damage) it
 *    rolls back to the start of that transaction and returns, and the
 *    Python loop takes over for it. tests/unit/test_speedups.py checks that
 *    both paths give equal events.
 *
 *    Without values (a reader that only counts rows: the look-ahead tail)
 *    the rows are walked here by each image's skip layout (_rowcodec.
 *    skip_layout) instead of calling the generated decoders, and carry no
 *    images: two Python calls a row fewer.
 *
 * Everything read from the buffer is bounds-checked: a relay log is input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* ---------- 1. constructors ------------------------------------------ */

/* self is the tuple (cls, field_names, offsets); args are the field values in
   order. offsets (bytes of Py_ssize_t, or None) are the fields' slot offsets
   where every field is a plain object slot (a slotted dataclass's): the values
   are then stored as PyMember_SetOne would store them, without looking each
   name up through the type (a tenth of the reader's time in its constructors). */
static PyObject *
construct(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(self, 0);
    PyObject *names = PyTuple_GET_ITEM(self, 1);
    PyObject *offsets = PyTuple_GET_ITEM(self, 2);
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (nargs != n) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd values (%zd given)", cls->tp_name, n, nargs);
        return NULL;
    }
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL)
        return NULL;
    if (offsets != Py_None) {
        const Py_ssize_t *off = (const Py_ssize_t *)PyBytes_AS_STRING(offsets);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject **slot = (PyObject **)((char *)obj + off[i]);
            PyObject *old = *slot;
            *slot = Py_NewRef(args[i]);
            Py_XDECREF(old);
        }
        return obj;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(names, i), args[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyMethodDef construct_def = {
    "construct", (PyCFunction)(void (*)(void))construct, METH_FASTCALL,
    "Build an instance from its field values, skipping __init__."};

/* The slot offsets of names in cls, as bytes, or None where one is not a
   writable object slot of cls's own layout. */
static PyObject *
slot_offsets(PyTypeObject *cls, PyObject *names)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(Py_ssize_t));
    if (out == NULL)
        return NULL;
    Py_ssize_t *off = (Py_ssize_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttr((PyObject *)cls, PyTuple_GET_ITEM(names, i));
        if (d == NULL) {
            PyErr_Clear();
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        int plain = Py_IS_TYPE(d, &PyMemberDescr_Type);
        if (plain) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            plain = m->type == T_OBJECT_EX && !(m->flags & READONLY) && m->offset > 0
                    && m->offset + (Py_ssize_t)sizeof(PyObject *) <= cls->tp_basicsize;
            off[i] = m->offset;
        }
        Py_DECREF(d);
        if (!plain) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
    }
    return out;
}

static PyObject *
constructor(PyObject *module, PyObject *args)
{
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyTuple_Type, &names))
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "field names must be str");
            return NULL;
        }
    }
    PyObject *offsets = slot_offsets((PyTypeObject *)cls, names);
    if (offsets == NULL)
        return NULL;
    PyObject *state = PyTuple_Pack(3, cls, names, offsets);
    Py_DECREF(offsets);
    if (state == NULL)
        return NULL;
    PyObject *fn = PyCFunction_NewEx(&construct_def, state, NULL);
    Py_DECREF(state);
    return fn;
}

/* ---------- 2. the transaction fast path ------------------------------ */

static inline uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32); }
/* The session's auto_increment_increment from a Query event's status variables
   (Q_AUTO_INCREMENT, code 3), walking those every server writes before it; 1 where
   absent or past one not known here. As decoder.py's _auto_increment. */
static long auto_increment(const unsigned char *buf, Py_ssize_t status, Py_ssize_t length)
{
    Py_ssize_t p = status, end = status + length;
    while (p < end) {
        unsigned char code = buf[p];
        Py_ssize_t size;
        switch (code) {
        case 3:
            if (p + 5 > end) return 1;
            return le16(buf + p + 1) ? le16(buf + p + 1) : 1;
        case 0: size = 4; break;
        case 1: size = 8; break;
        case 4: size = 6; break;
        case 7: case 8: size = 2; break;
        case 9: size = 8; break;
        case 2: case 5: case 6:  /* a length byte, the string (and Q_CATALOG_CODE's NUL) */
            if (p + 1 >= end) return 1;
            size = 1 + buf[p + 1] + (code == 2 ? 1 : 0);
            break;
        default:
            return 1;
        }
        p += 1 + size;
    }
    return 1;
}

static inline uint64_t le56(const unsigned char *p) { return (uint64_t)le32(p) | ((uint64_t)le16(p + 4) << 32) | ((uint64_t)p[6] << 48); }

/* CRC-32 (the binlog's checksum), eight bytes a step ("slicing-by-8"): one table
   lookup a byte chained on the last was about a fifth of the whole decode of a
   row event; eight independent lookups a step let the CPU overlap them. */
static uint32_t crc_table[8][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ le32(p), hi = le32(p + 4);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF]
            ^ crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* Packed (length-encoded) integer; returns 0 on success. */
static int
packed_int(const unsigned char *buf, Py_ssize_t *p, Py_ssize_t end, uint64_t *out)
{
    if (*p >= end)
        return -1;
    unsigned char first = buf[*p];
    if (first < 0xFB) { *out = first; *p += 1; return 0; }
    if (first == 0xFC && *p + 3 <= end) { *out = le16(buf + *p + 1); *p += 3; return 0; }
    if (first == 0xFD && *p + 4 <= end) {
        *out = (uint64_t)buf[*p + 1] | ((uint64_t)buf[*p + 2] << 8) | ((uint64_t)buf[*p + 3] << 16);
        *p += 4; return 0;
    }
    if (first == 0xFE && *p + 9 <= end) { *out = le64(buf + *p + 1); *p += 9; return 0; }
    return -1;
}

/* One row image walked by its skip layout: two bytes a logged column, whether
   it is nullable (its bit in the image's NULL bitmap then says whether it is
   there) and its width (0-239 bytes) or 240 + the bytes of its length prefix.
   Returns the offset after the image, or -1 where it would run past end. */
static Py_ssize_t
skip_image(const unsigned char *buf, Py_ssize_t q, Py_ssize_t end, const unsigned char *lay, Py_ssize_t n)
{
    Py_ssize_t nb = (n + 7) / 8;
    if (q + nb > end)
        return -1;
    const unsigned char *nulls = buf + q;
    q += nb;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char nullable = lay[2 * i], w = lay[2 * i + 1];
        if (nullable && (nulls[i >> 3] >> (i & 7)) & 1)
            continue;
        if (w < 240) {
            q += w;
        } else {
            int k = w - 240;
            if (k < 1 || k > 4 || q + k > end)
                return -1;
            uint64_t len = 0;
            for (int b = k - 1; b >= 0; b--)
                len = (len << 8) | buf[q + b];
            if (len > (uint64_t)(end - q - k))
                return -1;
            q += k + (Py_ssize_t)len;
        }
        if (q > end)
            return -1;
    }
    return q;
}

static PyObject *str_table_id, *str_values, *str_skips, *str_info, *str_unchecked, *str_qualified,
    *str_probeable;

#define MAX_TABLES 16

typedef struct {
    uint64_t id;
    PyObject *td; /* borrowed from the definitions dict, which outlives the call */
} table_slot;

/* Interned call helpers. */
static PyObject *
call(PyObject *fn, PyObject *const *args, size_t n)
{
    return PyObject_Vectorcall(fn, args, n, NULL);
}

static PyObject *
uuid_text(const unsigned char *u, uint64_t gno)
{
    static const char hex[] = "0123456789abcdef";
    char s[64];
    int k = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            s[k++] = '-';
        s[k++] = hex[u[i] >> 4];
        s[k++] = hex[u[i] & 15];
    }
    s[k] = 0;
    return PyUnicode_FromFormat("%s:%llu", s, (unsigned long long)gno);
}

/* Appends a row change with the given images; 0, or -1 on an error. */
static int
append_row(PyObject *new_row, PyObject *info, PyObject *kind_obj, PyObject *before, PyObject *after,
           PyObject *out)
{
    PyObject *ra[4] = {info, kind_obj, before, after};
    PyObject *row = call(new_row, ra, 4);
    if (row == NULL)
        return -1;
    int rc = PyList_Append(out, row);
    Py_DECREF(row);
    return rc;
}

/* One row image decoded by its value layout (_rowcodec.value_layout: the needed
   columns are all integers): the tuple of the needed values, as the generated
   function gives it, and *qp moved past the image. NULL without an error where the
   image would run past end (the caller rolls back to the Python path, which says
   what is wrong), with one on a failed allocation. */
static PyObject *
values_image(const unsigned char *buf, Py_ssize_t *qp, Py_ssize_t end, PyObject *layout)
{
    const unsigned char *lay = (const unsigned char *)PyBytes_AS_STRING(layout);
    Py_ssize_t laylen = PyBytes_GET_SIZE(layout);
    if (laylen < 1 || (laylen - 1) % 3 != 0)
        return NULL;
    Py_ssize_t n_needed = lay[0], n = (laylen - 1) / 3, q = *qp, nb = (n + 7) / 8;
    if (q + nb > end)
        return NULL;
    const unsigned char *nulls = buf + q;
    q += nb;
    PyObject *t = PyTuple_New(n_needed);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n_needed; i++)
        PyTuple_SET_ITEM(t, i, Py_NewRef(Py_None));
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char flags = lay[1 + 3 * i], w = lay[2 + 3 * i], slot = lay[3 + 3 * i];
        if ((flags & 1) && (nulls[i >> 3] >> (i & 7)) & 1)
            continue;
        if (w < 240) {
            if (q + w > end)
                goto overrun;
            if (flags & 2) {
                if (w < 1 || w > 8 || slot >= n_needed)
                    goto overrun;
                uint64_t u = 0;
                for (int b = w - 1; b >= 0; b--)
                    u = (u << 8) | buf[q + b];
                PyObject *v;
                if (flags & 4)
                    v = PyLong_FromUnsignedLongLong(u);
                else if (w < 8 && ((u >> (8 * w - 1)) & 1))
                    v = PyLong_FromLongLong((long long)u - (long long)(1ULL << (8 * w)));
                else
                    v = PyLong_FromLongLong((long long)u);
                if (v == NULL) {
                    Py_DECREF(t);
                    return NULL;
                }
                PyObject *old = PyTuple_GET_ITEM(t, slot);
                PyTuple_SET_ITEM(t, slot, v);
                Py_DECREF(old);
            }
            q += w;
        } else {
            int k = w - 240;
            if (k < 1 || k > 4 || q + k > end)
                goto overrun;
            uint64_t len = 0;
            for (int b = k - 1; b >= 0; b--)
                len = (len << 8) | buf[q + b];
            if (len > (uint64_t)(end - q - k))
                goto overrun;
            q += k + (Py_ssize_t)len;
        }
    }
    *qp = q;
    return t;
overrun:
    Py_DECREF(t);
    return NULL;
}

/* The rows of one event from q to body_end, decoded by dec1 (and dec2 for an
   update's after image): a value layout read by values_image, or a generated
   image decoder. As in decoder.py, they
   see this event's bytes only (offsets relative to its start p), so a damaged
   length cannot read or copy beyond it, and every row must consume bytes, or
   a zero-width column set would append rows forever. Returns the offset after
   the rows, or -1 (an error may be set); *count: rows appended. */
static Py_ssize_t
decode_rows(const unsigned char *buf, Py_ssize_t p, Py_ssize_t q, Py_ssize_t body_end,
            PyObject *dec1, PyObject *dec2, int kind, PyObject *info, PyObject *kind_obj,
            PyObject *new_row, PyObject *out, Py_ssize_t *count)
{
    /* A generated function sees the event's bytes as an object; a value layout
       (bytes) is read here, without one. */
    PyObject *evobj = NULL;
    if (!PyBytes_Check(dec1) || (dec2 != NULL && !PyBytes_Check(dec2))) {
        evobj = PyBytes_FromStringAndSize((const char *)buf + p, body_end - p);
        if (evobj == NULL)
            return -1;
    }
    Py_ssize_t ev_end = body_end - p;
    q -= p;
    int ok = 1;
    while (ok && q < ev_end) {
        PyObject *vals[2] = {NULL, NULL};
        Py_ssize_t row_start = q;
        for (int img = 0; img < (kind == 1 ? 2 : 1); img++) {
            PyObject *dec = img == 0 ? dec1 : dec2;
            if (PyBytes_Check(dec)) {
                vals[img] = values_image(buf + p, &q, ev_end, dec);
                if (vals[img] == NULL) { ok = 0; break; }
                continue;
            }
            PyObject *posobj = PyLong_FromSsize_t(q);
            if (posobj == NULL) { ok = 0; break; }
            PyObject *ca[2] = {evobj, posobj};
            PyObject *res = call(dec, ca, 2);
            Py_DECREF(posobj);
            if (res == NULL) { ok = 0; break; }
            if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
                Py_DECREF(res);
                ok = 0;
                break;
            }
            vals[img] = Py_NewRef(PyTuple_GET_ITEM(res, 0));
            q = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1));
            Py_DECREF(res);
            if (q < 0 || q > ev_end) { ok = 0; break; }
        }
        if (ok && q <= row_start) ok = 0;
        if (ok && append_row(new_row, info, kind_obj, kind == 0 ? Py_None : vals[0],
                             kind == 0 ? vals[0] : (kind == 1 ? vals[1] : Py_None), out) < 0)
            ok = 0;
        Py_XDECREF(vals[0]);
        Py_XDECREF(vals[1]);
        if (ok) (*count)++;
    }
    Py_XDECREF(evobj);
    return ok ? q + p : -1;
}

/* The same rows walked by their skip layouts (bytes: see skip_image), appended
   without images. */
static Py_ssize_t
walk_rows(const unsigned char *buf, Py_ssize_t q, Py_ssize_t body_end, PyObject *lay1, PyObject *lay2,
          PyObject *info, PyObject *kind_obj, PyObject *new_row, PyObject *out, Py_ssize_t *count)
{
    const unsigned char *l1 = (const unsigned char *)PyBytes_AS_STRING(lay1);
    Py_ssize_t n1 = PyBytes_GET_SIZE(lay1) / 2;
    const unsigned char *l2 = lay2 ? (const unsigned char *)PyBytes_AS_STRING(lay2) : NULL;
    Py_ssize_t n2 = lay2 ? PyBytes_GET_SIZE(lay2) / 2 : 0;
    while (q < body_end) {
        Py_ssize_t row_start = q;
        q = skip_image(buf, q, body_end, l1, n1);
        if (q >= 0 && l2 != NULL)
            q = skip_image(buf, q, body_end, l2, n2);
        if (q <= row_start || append_row(new_row, info, kind_obj, Py_None, Py_None, out) < 0)
            return -1;
        (*count)++;
    }
    return q;
}

/* One call's memory of its last lookups. The pointers into the buffer stay
   valid for the call (it holds the bytes object); the objects are held here,
   not borrowed, so that nothing the decoders run can free them. */
typedef struct {
    const unsigned char *map_at; /* the last TABLE_MAP body, and the table it named */
    Py_ssize_t map_len;
    PyObject *map_td;
    uint64_t map_tid;
    PyObject *rows_td; /* the last rows event's table */
    int rows_kind, rows_unchecked;
    const unsigned char *rows_at; /* its column bitmaps, and what they looked up */
    Py_ssize_t rows_len;
    PyObject *im1, *im2, *info, *qualified;
    int probeable;
    PyObject *one_table, *one_frozen; /* the last single-table transaction's frozenset */
    PyObject *no_tables;
} lookup_cache;

static void
cache_rows_clear(lookup_cache *c)
{
    Py_CLEAR(c->rows_td);
    Py_CLEAR(c->im1);
    Py_CLEAR(c->im2);
    Py_CLEAR(c->info);
    Py_CLEAR(c->qualified);
}

static void
cache_clear(lookup_cache *c)
{
    Py_CLEAR(c->map_td);
    cache_rows_clear(c);
    Py_CLEAR(c->one_table);
    Py_CLEAR(c->one_frozen);
    Py_CLEAR(c->no_tables);
}

/* A rows event's image decoders (or, without values, skip layouts) for its
   column bitmaps, its table's info (as unchecked under NO_FOREIGN_KEY_CHECKS_F,
   decoder.py), qualified name and probeable flag, into the cache. 0; -1 with
   an error set, or -1 without one where the fast path does not apply. */
static int
rows_lookup(lookup_cache *c, PyObject *td, const unsigned char *maps, Py_ssize_t nb, int kind,
            int unchecked, int values)
{
    cache_rows_clear(c);
    PyObject *lookup = PyObject_GetAttr(td, values ? str_values : str_skips);
    if (lookup == NULL)
        return -1;
    PyObject *k1 = PyBytes_FromStringAndSize((const char *)maps, nb);
    PyObject *k2 = kind == 1 ? PyBytes_FromStringAndSize((const char *)maps + nb, nb) : NULL;
    PyObject *im1 = k1 ? PyDict_GetItemWithError(lookup, k1) : NULL;
    PyObject *im2 = (kind == 1 && k2) ? PyDict_GetItemWithError(lookup, k2) : NULL;
    Py_XDECREF(k1);
    Py_XDECREF(k2);
    Py_XINCREF(im1);
    Py_XINCREF(im2);
    Py_DECREF(lookup);
    if (PyErr_Occurred() || im1 == NULL || (kind == 1 && im2 == NULL)
        || (!values && (!PyBytes_Check(im1) || (im2 != NULL && !PyBytes_Check(im2))))) {
        Py_XDECREF(im1);
        Py_XDECREF(im2);
        return -1;
    }
    PyObject *info = PyObject_GetAttr(td, unchecked ? str_unchecked : str_info);
    PyObject *qualified = PyObject_GetAttr(td, str_qualified);
    PyObject *probeable = PyObject_GetAttr(td, str_probeable);
    int is_probeable = probeable ? PyObject_IsTrue(probeable) : -1;
    Py_XDECREF(probeable);
    if (!(info && qualified) || is_probeable < 0) {
        /* As a decoding trouble: the Python path's to report. */
        PyErr_Clear();
        Py_XDECREF(info); Py_XDECREF(qualified); Py_DECREF(im1); Py_XDECREF(im2);
        return -1;
    }
    c->rows_td = Py_NewRef(td);
    c->rows_kind = kind;
    c->rows_unchecked = unchecked;
    c->rows_at = maps;
    c->rows_len = nb * (kind == 1 ? 2 : 1);
    c->im1 = im1;
    c->im2 = im2;
    c->info = info;
    c->qualified = qualified;
    c->probeable = is_probeable;
    return 0;
}

/* The frozenset of a transaction's tables: one new set only for several; the
   last one-table set again while transactions keep to the same table. */
static PyObject *
tables_of(lookup_cache *c, PyObject *single, PyObject *tables)
{
    if (tables != NULL)
        return PyFrozenSet_New(tables);
    if (single == NULL) {
        if (c->no_tables == NULL && (c->no_tables = PyFrozenSet_New(NULL)) == NULL)
            return NULL;
        return Py_NewRef(c->no_tables);
    }
    if (c->one_table != single) {
        PyObject *set = PySet_New(NULL);
        if (set == NULL || PySet_Add(set, single) < 0) {
            Py_XDECREF(set);
            return NULL;
        }
        PyObject *frozen = PyFrozenSet_New(set);
        Py_DECREF(set);
        if (frozen == NULL)
            return NULL;
        Py_XSETREF(c->one_frozen, frozen);
        Py_XSETREF(c->one_table, Py_NewRef(single));
    }
    return Py_NewRef(c->one_frozen);
}

/*
 * fast_transactions(buf, pos, end, base, crc_len, verify, tid_len, query_ph,
 *                   definitions, file, source_file, out,
 *                   new_start, new_end, new_row, new_rows_query, kinds, new_statement, values)
 * -> (pos, events, rows, unprobeable, transactions)
 */
static PyObject *
fast_transactions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 19) {
        PyErr_SetString(PyExc_TypeError, "fast_transactions takes 19 arguments");
        return NULL;
    }
    PyObject *bufobj = args[0];
    if (!PyBytes_Check(bufobj)) {
        PyErr_SetString(PyExc_TypeError, "buf must be bytes");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t base = PyLong_AsSsize_t(args[3]);
    long crc_len = PyLong_AsLong(args[4]);
    int verify = PyObject_IsTrue(args[5]);
    long tid_len = PyLong_AsLong(args[6]);
    long query_ph = PyLong_AsLong(args[7]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *definitions = args[8], *file = args[9], *source_file = args[10], *out = args[11];
    PyObject *new_start = args[12], *new_end = args[13], *new_row = args[14], *new_rq = args[15];
    PyObject *kinds = args[16], *new_stmt = args[17];
    int values = PyObject_IsTrue(args[18]);
    if (values < 0)
        return NULL;
    if (!PyDict_Check(definitions) || !PyList_Check(out) || !PyTuple_Check(kinds) ||
        PyTuple_GET_SIZE(kinds) != 3) {
        PyErr_SetString(PyExc_TypeError, "bad argument types");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(bufobj);
    Py_ssize_t buflen = PyBytes_GET_SIZE(bufobj);
    if (end > buflen)
        end = buflen;
    if (pos < 0 || crc_len < 0 || tid_len != 6)
        return Py_BuildValue("(nnnnn)", pos, (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0);

    Py_ssize_t n_events = 0, n_rows = 0, n_unprobeable = 0, n_trx = 0;
    /* What the last table map and the last rows event looked up, kept for this
       call: a catch-up maps the same few tables in transaction after
       transaction, and each lookup first copies bytes into a new object to
       hash them (see cache_clear). */
    lookup_cache c = {0};

    for (;;) {
        /* ---- one transaction; on any surprise, roll back to trx_pos ---- */
        Py_ssize_t trx_pos = pos, mark = PyList_GET_SIZE(out);
        Py_ssize_t t_events = 0, t_rows = 0, t_unprobeable = 0, t_row_events = 0, t_statements = 0;
        table_slot slots[MAX_TABLES];
        int nslots = 0, done = 0, failed = 0;
        PyObject *gtid = NULL, *tables = NULL;
        Py_ssize_t p = pos;
        int have_insert_id = 0;  /* an Intvar INSERT_ID for the next Query event */
        uint64_t insert_id = 0;

        PyObject *single = NULL; /* the one table so far; a set only past one */

        while (!done && !failed) {
            if (p + 19 > end) { failed = 1; break; }
            const unsigned char *h = buf + p;
            uint32_t ts = le32(h), sid = le32(h + 5), size = le32(h + 9), logpos = le32(h + 13);
            unsigned char typ = h[4];
            if (size < 19 || (Py_ssize_t)size > end - p) { failed = 1; break; }
            Py_ssize_t nxt = p + size, body = p + 19, body_end = nxt - crc_len;
            if (body_end < body) { failed = 1; break; }
            if (verify && crc_len == 4 && crc32_of(buf + p, body_end - p) != le32(buf + body_end)) {
                failed = 1; break;
            }
            int first = (t_events == 0);
            if (first) {
                PyObject *ev = NULL;
                if (typ == 162) { /* MariaDB GTID */
                    if (body + 13 > body_end || (buf[body + 12] & 1)) { failed = 1; break; }
                    uint64_t seq = le64(buf + body);
                    uint32_t domain = le32(buf + body + 8);
                    gtid = PyUnicode_FromFormat("%u-%u-%llu", domain, sid, (unsigned long long)seq);
                    if (gtid == NULL) goto error;
                    PyObject *a[13];
                    a[0] = file; a[1] = PyLong_FromSsize_t(base + p); a[2] = source_file;
                    a[3] = logpos ? PyLong_FromSsize_t((Py_ssize_t)logpos - (Py_ssize_t)size) : Py_NewRef(Py_None);
                    a[4] = gtid; a[5] = PyFloat_FromDouble((double)ts); a[6] = PyLong_FromUnsignedLong(ts);
                    a[7] = PyLong_FromUnsignedLong(sid);
                    a[8] = Py_None; a[9] = Py_None; a[10] = Py_None; a[11] = Py_None; a[12] = Py_False;
                    if (a[1] && a[3] && a[5] && a[6] && a[7])
                        ev = call(new_start, a, 13);
                    Py_XDECREF(a[1]); Py_XDECREF(a[3]); Py_XDECREF(a[5]); Py_XDECREF(a[6]); Py_XDECREF(a[7]);
                } else if (typ == 33 || typ == 34) { /* MySQL GTID / anonymous GTID */
                    Py_ssize_t q = body;
                    if (q + 25 > body_end) { failed = 1; break; }
                    uint64_t gno = le64(buf + q + 17);
                    if (typ == 33) {
                        gtid = uuid_text(buf + q + 1, gno);
                        if (gtid == NULL) goto error;
                    } else {
                        gtid = Py_NewRef(Py_None);
                    }
                    q += 25;
                    PyObject *lc = Py_NewRef(Py_None), *sq = Py_NewRef(Py_None);
                    PyObject *imm = Py_NewRef(Py_None), *tlen = Py_NewRef(Py_None);
                    uint64_t commit_us = 0;
                    if (q < body_end && buf[q] == 2 && q + 17 <= body_end) {
                        Py_DECREF(lc); Py_DECREF(sq);
                        lc = PyLong_FromUnsignedLongLong(le64(buf + q + 1));
                        sq = PyLong_FromUnsignedLongLong(le64(buf + q + 9));
                        q += 17;
                        if (q + 7 <= body_end) {
                            uint64_t imm_us = le56(buf + q);
                            q += 7;
                            if (imm_us & (1ULL << 55)) {
                                imm_us &= ~(1ULL << 55);
                                if (q + 7 > body_end) failed = 1; /* damaged: Python reports it */
                                else { commit_us = le56(buf + q); q += 7; }
                            } else {
                                commit_us = imm_us;
                            }
                            Py_DECREF(imm);
                            imm = imm_us ? PyFloat_FromDouble((double)imm_us / 1e6) : Py_NewRef(Py_None);
                        }
                        if (q < body_end) {
                            uint64_t v;
                            if (packed_int(buf, &q, body_end, &v) == 0) {
                                Py_DECREF(tlen);
                                tlen = PyLong_FromUnsignedLongLong(v);
                            } else {
                                failed = 1;
                            }
                        }
                    }
                    PyObject *a[13];
                    a[0] = file; a[1] = PyLong_FromSsize_t(base + p); a[2] = source_file;
                    a[3] = logpos ? PyLong_FromSsize_t((Py_ssize_t)logpos - (Py_ssize_t)size) : Py_NewRef(Py_None);
                    a[4] = gtid;
                    a[5] = PyFloat_FromDouble(commit_us ? (double)commit_us / 1e6 : (double)ts);
                    a[6] = PyLong_FromUnsignedLong(ts); a[7] = PyLong_FromUnsignedLong(sid);
                    a[8] = tlen; a[9] = imm; a[10] = lc; a[11] = sq; a[12] = Py_False;
                    if (!failed && a[1] && a[3] && a[5] && a[6] && a[7] && lc && sq && imm && tlen)
                        ev = call(new_start, a, 13);
                    Py_XDECREF(a[1]); Py_XDECREF(a[3]); Py_XDECREF(a[5]); Py_XDECREF(a[6]); Py_XDECREF(a[7]);
                    Py_XDECREF(lc); Py_XDECREF(sq); Py_XDECREF(imm); Py_XDECREF(tlen);
                    if (failed) break;
                } else {
                    failed = 1;
                    break;
                }
                if (ev == NULL) goto error;
                int rc = PyList_Append(out, ev);
                Py_DECREF(ev);
                if (rc < 0) goto error;
            } else if (typ == 19) { /* TABLE_MAP */
                PyObject *td;
                uint64_t tid;
                if (c.map_td != NULL && body_end - body == c.map_len
                    && memcmp(buf + body, c.map_at, (size_t)c.map_len) == 0) {
                    td = c.map_td;
                    tid = c.map_tid;
                } else {
                    PyObject *key = PyBytes_FromStringAndSize((const char *)buf + body, body_end - body);
                    if (key == NULL) goto error;
                    td = PyDict_GetItemWithError(definitions, key);
                    Py_DECREF(key);
                    if (td == NULL) {
                        if (PyErr_Occurred()) goto error;
                        failed = 1; break;
                    }
                    PyObject *tid_obj = PyObject_GetAttr(td, str_table_id);
                    if (tid_obj == NULL) goto error;
                    tid = PyLong_AsUnsignedLongLong(tid_obj);
                    Py_DECREF(tid_obj);
                    if (PyErr_Occurred()) goto error;
                    Py_XSETREF(c.map_td, Py_NewRef(td));
                    c.map_at = buf + body;
                    c.map_len = body_end - body;
                    c.map_tid = tid;
                }
                int k;
                for (k = 0; k < nslots && slots[k].id != tid; k++)
                    ;
                if (k == nslots) {
                    if (nslots == MAX_TABLES) { failed = 1; break; }
                    nslots++;
                }
                slots[k].id = tid;
                slots[k].td = td;
            } else if (typ == 23 || typ == 24 || typ == 25 || typ == 30 || typ == 31 || typ == 32) {
                int v2 = typ >= 30;
                int kind = v2 ? typ - 30 : typ - 23; /* 0 insert, 1 update, 2 delete */
                Py_ssize_t q = body;
                if (q + 8 > body_end) { failed = 1; break; }
                uint64_t tid = (uint64_t)le32(buf + q) | ((uint64_t)buf[q + 4] << 32) | ((uint64_t)buf[q + 5] << 40);
                uint16_t rflags = le16(buf + q + 6);
                q += 8;
                if (v2) {
                    if (q + 2 > body_end) { failed = 1; break; }
                    q += le16(buf + q);
                }
                uint64_t ncols;
                if (packed_int(buf, &q, body_end, &ncols) != 0 || ncols == 0 || ncols > 4096) {
                    failed = 1;
                    break;
                }
                Py_ssize_t nb = (Py_ssize_t)((ncols + 7) / 8);
                if (q + nb * (kind == 1 ? 2 : 1) > body_end) { failed = 1; break; }
                int k;
                for (k = 0; k < nslots && slots[k].id != tid; k++)
                    ;
                if (k == nslots) { failed = 1; break; }
                PyObject *td = slots[k].td;
                Py_ssize_t maps = nb * (kind == 1 ? 2 : 1);
                int unchecked = (rflags & 2) != 0;
                if (!(c.rows_td == td && c.rows_kind == kind && c.rows_unchecked == unchecked
                      && c.rows_len == maps && memcmp(buf + q, c.rows_at, (size_t)maps) == 0)) {
                    if (rows_lookup(&c, td, buf + q, nb, kind, unchecked, values) < 0) {
                        if (PyErr_Occurred()) goto error;
                        failed = 1;
                        break;
                    }
                }
                q += maps;
                PyObject *im1 = c.im1, *im2 = c.im2, *info = c.info, *qualified = c.qualified;
                PyObject *kind_obj = PyTuple_GET_ITEM(kinds, kind);
                Py_ssize_t n = 0;
                if (values)
                    q = decode_rows(buf, p, q, body_end, im1, im2, kind, info, kind_obj, new_row, out, &n);
                else
                    q = walk_rows(buf, q, body_end, im1, im2, info, kind_obj, new_row, out, &n);
                int add_rc = 0;
                if (q >= 0 && single != qualified) {
                    if (single == NULL) {
                        single = Py_NewRef(qualified);
                    } else {
                        if (tables == NULL) {
                            tables = PySet_New(NULL);
                            add_rc = tables == NULL ? -1 : PySet_Add(tables, single);
                        }
                        if (add_rc == 0)
                            add_rc = PySet_Add(tables, qualified);
                    }
                }
                if (q < 0 || add_rc < 0) {
                    /* Decoding trouble (or a rows/event length mismatch) is the
                       Python path's to report; drop any error and roll back. */
                    PyErr_Clear();
                    failed = 1;
                    break;
                }
                if (q != body_end) { failed = 1; break; }
                t_rows += n;
                if (!c.probeable) t_unprobeable += n;
                t_row_events++;
                if (rflags & 1) t_statements++;
            } else if (typ == 160 || typ == 29) { /* Annotate_rows / Rows_query */
                Py_ssize_t at = body + (typ == 29 ? 1 : 0);
                if (at > body_end) { failed = 1; break; }
                PyObject *text = PyUnicode_DecodeUTF8((const char *)buf + at, body_end - at, "replace");
                if (text == NULL) goto error;
                PyObject *ev = call(new_rq, &text, 1);
                Py_DECREF(text);
                if (ev == NULL) goto error;
                int rc = PyList_Append(out, ev);
                Py_DECREF(ev);
                if (rc < 0) goto error;
            } else if (typ == 5) { /* Intvar: INSERT_ID (2) names the next statement's first value */
                if (body + 9 > body_end) { failed = 1; break; }
                if (buf[body] == 2) {
                    have_insert_id = 1;
                    insert_id = le64(buf + body + 1);
                }
            } else if (typ == 2) { /* the BEGIN that follows a GTID, or a DML statement */
                int had_insert_id = have_insert_id;
                have_insert_id = 0;  /* as decoder.py: it names the Query event after it, whatever it is */
                if (query_ph != 13 || body + 13 > body_end) { failed = 1; break; }
                Py_ssize_t db_len = buf[body + 8];
                Py_ssize_t at = body + 13 + le16(buf + body + 11); /* past the status variables */
                if (at + db_len + 1 > body_end || buf[at + db_len] != 0) { failed = 1; break; }
                Py_ssize_t sql = at + db_len + 1, n = body_end - sql;
                if (n == 5 && memcmp(buf + sql, "BEGIN", 5) == 0) {
                    /* nothing to append: the GTID began the transaction */
                } else {
                    /* As decoder.py's KEYWORD: the first word is the longest run of
                       letters. Only a statement that starts with it is taken here
                       (leading space or a comment: the Python loop's). */
                    Py_ssize_t k = 0;
                    char word[8];
                    while (k < n && k < 8 && ((buf[sql + k] | 0x20) >= 'a' && (buf[sql + k] | 0x20) <= 'z')) {
                        word[k] = (char)(buf[sql + k] | 0x20);
                        k++;
                    }
                    int dml = k < 8 && (k == n || !((buf[sql + k] | 0x20) >= 'a' && (buf[sql + k] | 0x20) <= 'z'))
                        && ((k == 6 && (memcmp(word, "insert", 6) == 0 || memcmp(word, "update", 6) == 0
                                        || memcmp(word, "delete", 6) == 0))
                            || (k == 7 && memcmp(word, "replace", 7) == 0));
                    if (!dml) { failed = 1; break; }
                    PyObject *schema = db_len
                        ? PyUnicode_DecodeUTF8((const char *)buf + at, db_len, "replace")
                        : Py_NewRef(Py_None);
                    PyObject *text = PyUnicode_DecodeUTF8((const char *)buf + sql, n, "surrogateescape");
                    /* As decoder.py: flags2 (Q_FLAGS2_CODE, first where a server wrote the status
                       variables) with OPTION_NO_FOREIGN_KEY_CHECKS: the SQL thread checks no parent. */
                    Py_ssize_t status = body + 13, status_len = le16(buf + body + 11);
                    int unchecked = status_len >= 5 && buf[status] == 0 && (le32(buf + status + 1) & (1u << 26));
                    PyObject *a[7] = {schema, text, PyLong_FromUnsignedLong(le32(buf + body + 4)),
                                      PyLong_FromUnsignedLong(ts), unchecked ? Py_False : Py_True,
                                      had_insert_id ? PyLong_FromUnsignedLongLong(insert_id) : Py_NewRef(Py_None),
                                      PyLong_FromLong(had_insert_id ? auto_increment(buf, status, status_len) : 1)};
                    PyObject *ev = NULL;
                    if (schema && text && a[2] && a[3] && a[5] && a[6])
                        ev = call(new_stmt, a, 7);
                    Py_XDECREF(schema); Py_XDECREF(text); Py_XDECREF(a[2]); Py_XDECREF(a[3]);
                    Py_XDECREF(a[5]); Py_XDECREF(a[6]);
                    if (ev == NULL) goto error;
                    int rc = PyList_Append(out, ev);
                    Py_DECREF(ev);
                    if (rc < 0) goto error;
                    t_statements++;
                }
            } else if (typ == 16) { /* XID ends it */
                if (body + 8 > body_end) { failed = 1; break; }
                PyObject *frozen = tables_of(&c, single, tables);
                PyObject *a[12];
                a[0] = file; a[1] = PyLong_FromSsize_t(base + nxt); a[2] = source_file;
                a[3] = logpos ? PyLong_FromUnsignedLong(logpos) : Py_NewRef(Py_None);
                a[4] = gtid; a[5] = Py_True; a[6] = PyLong_FromUnsignedLongLong(le64(buf + body));
                a[7] = PyLong_FromSsize_t(nxt - trx_pos); a[8] = PyLong_FromSsize_t(t_rows);
                a[9] = PyLong_FromSsize_t(t_row_events); a[10] = PyLong_FromSsize_t(t_statements);
                a[11] = frozen;
                PyObject *ev = NULL;
                if (frozen && a[1] && a[3] && a[6] && a[7] && a[8] && a[9] && a[10])
                    ev = call(new_end, a, 12);
                Py_XDECREF(frozen); Py_XDECREF(a[1]); Py_XDECREF(a[3]); Py_XDECREF(a[6]);
                Py_XDECREF(a[7]); Py_XDECREF(a[8]); Py_XDECREF(a[9]); Py_XDECREF(a[10]);
                if (ev == NULL) goto error;
                int rc = PyList_Append(out, ev);
                Py_DECREF(ev);
                if (rc < 0) goto error;
                done = 1;
            } else {
                failed = 1;
                break;
            }
            t_events++;
            p = nxt;
        }
        Py_XDECREF(gtid);
        Py_XDECREF(tables);
        Py_XDECREF(single);
        if (failed) {
            if (PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL) < 0) {
                cache_clear(&c);
                return NULL;
            }
            pos = trx_pos;
            break;
        }
        n_events += t_events;
        n_rows += t_rows;
        n_unprobeable += t_unprobeable;
        n_trx++;
        pos = p;
        continue;
    error:
        Py_XDECREF(gtid);
        Py_XDECREF(tables);
        Py_XDECREF(single);
        cache_clear(&c);
        return NULL;
    }
    cache_clear(&c);
    return Py_BuildValue("(nnnnn)", pos, n_events, n_rows, n_unprobeable, n_trx);
}

static PyMethodDef methods[] = {
    {"constructor", constructor, METH_VARARGS,
     "constructor(cls, field_names) -> callable(*values) building cls without __init__"},
    {"fast_transactions", (PyCFunction)(void (*)(void))fast_transactions, METH_FASTCALL,
     "Decode whole common-shape row transactions; see the module comment."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "lagd relay-log reader accelerator", -1, methods};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    str_table_id = PyUnicode_InternFromString("table_id");
    str_values = PyUnicode_InternFromString("_values");
    str_skips = PyUnicode_InternFromString("_skips");
    str_info = PyUnicode_InternFromString("info");
    str_unchecked = PyUnicode_InternFromString("unchecked");
    str_qualified = PyUnicode_InternFromString("qualified");
    str_probeable = PyUnicode_InternFromString("probeable");
    if (!str_table_id || !str_values || !str_skips || !str_info || !str_unchecked || !str_qualified
        || !str_probeable)
        return NULL;
    return PyModule_Create(&module);
}
