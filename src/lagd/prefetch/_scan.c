/*
 * Optional accelerator for prefetch/fingerprint.py: fingerprint(sql) cuts a
 * statement into its shape and literals exactly as the Python scanner there
 * (one regular expression and a loop over its matches) does, in one pass.
 *
 * It takes only what it can cut without the expression's backtracking: ASCII
 * text. An unterminated string or quoted identifier, or a number or hex
 * literal run into a word character ("1.5e", "0x1G", "2abc"), makes it return
 * NotImplemented, and the Python scanner decides; so does any non-ASCII text
 * (whose UTF-8 check is the Python scanner's). tests/unit/test_fingerprint.py
 * runs its cases through both and compares them on seeded random token soup.
 *
 * Plain comments become one space each first (rewrite_sql.uncommented): a
 * request id in a comment must not make every statement a shape of its own.
 *
 * Statements are read 200,000 times in a catch-up: the Python scanner took
 * 5-6 µs of the 8-10 µs a statement-based INSERT cost the batcher.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { KIND_Q = 1, KIND_H = 2, KIND_N = 3 };

/* The regular expression's classes, for ASCII (str patterns are Unicode-aware;
   on ASCII they are these). */
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_word(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
/* \s, and what str.rstrip() strips */
static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
/* (?![\w$]) after a number or hex literal */
static int ends_ok(const unsigned char *s, Py_ssize_t n, Py_ssize_t j)
{
    return j >= n || !(is_word(s[j]) || s[j] == '$');
}
/* (?<![\w$@.]) before one */
static int starts_ok(const unsigned char *s, Py_ssize_t i)
{
    if (i == 0)
        return 1;
    unsigned char c = s[i - 1];
    return !(is_word(c) || c == '$' || c == '@' || c == '.');
}

/* A quoted string (q is ' or ", backslash escapes) or identifier (`, none)
   starting at i: one past its closing quote, or -1 where the greedy pass runs
   to the end of the text (the expression would backtrack: not taken here). */
static Py_ssize_t quoted(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, unsigned char q, int escapes)
{
    Py_ssize_t j = i + 1;
    while (j < n) {
        unsigned char c = s[j];
        if (escapes && c == '\\') {
            if (j + 1 >= n)
                return -1;
            j += 2;
        } else if (c == q) {
            if (j + 1 < n && s[j + 1] == q)
                j += 2;
            else
                return j + 1;
        } else {
            j++;
        }
    }
    return -1;
}

/* A number at i (lookbehind already checked): its end; 0 where none starts
   here; -1 where one starts but runs into a word character (not taken). */
static Py_ssize_t number(const unsigned char *s, Py_ssize_t n, Py_ssize_t i)
{
    Py_ssize_t j = i;
    if (is_digit(s[j])) {
        while (j < n && is_digit(s[j]))
            j++;
        if (j < n && s[j] == '.') {
            j++;
            while (j < n && is_digit(s[j]))
                j++;
        }
    } else if (s[j] == '.' && j + 1 < n && is_digit(s[j + 1])) {
        j++;
        while (j < n && is_digit(s[j]))
            j++;
    } else {
        return 0;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        Py_ssize_t k = j + 1;
        if (k < n && (s[k] == '+' || s[k] == '-'))
            k++;
        if (k < n && is_digit(s[k])) {
            while (k < n && is_digit(s[k]))
                k++;
            j = k;
        }
    }
    return ends_ok(s, n, j) ? j : -1;
}

/* The end of the run of hex (or bit) digits from j. */
static Py_ssize_t digits_end(const unsigned char *s, Py_ssize_t n, Py_ssize_t j, int hex)
{
    while (j < n && (hex ? is_hex(s[j]) : (s[j] == '0' || s[j] == '1')))
        j++;
    return j;
}

/* A hex or bit literal at i (lookbehind already checked): its end, or 0. */
static Py_ssize_t hexbit(const unsigned char *s, Py_ssize_t n, Py_ssize_t i)
{
    unsigned char c = s[i];
    if (i + 1 >= n)
        return 0;
    if ((c == 'x' || c == 'X' || c == 'b' || c == 'B') && s[i + 1] == '\'') {
        Py_ssize_t j = digits_end(s, n, i + 2, c == 'x' || c == 'X');
        if (j < n && s[j] == '\'' && ends_ok(s, n, j + 1))
            return j + 1;
        return 0;
    }
    if (c == '0' && (s[i + 1] == 'x' || s[i + 1] == 'b')) {
        Py_ssize_t j = digits_end(s, n, i + 2, s[i + 1] == 'x');
        /* a shorter run would be followed by a digit: it fails the same way */
        if (j > i + 2 && ends_ok(s, n, j))
            return j;
    }
    return 0;
}

/* _LIST_SEP.fullmatch: \s*,\s* */
static int list_sep(const unsigned char *s, Py_ssize_t a, Py_ssize_t b)
{
    while (a < b && is_space(s[a]))
        a++;
    if (a >= b || s[a] != ',')
        return 0;
    a++;
    while (a < b && is_space(s[a]))
        a++;
    return a == b;
}

/* _IN_OPEN.search of the text [a, b): \bIN\s*\(\s*$ (any case) */
static int in_open(const unsigned char *s, Py_ssize_t a, Py_ssize_t b)
{
    while (b > a && is_space(s[b - 1]))
        b--;
    if (b <= a || s[b - 1] != '(')
        return 0;
    b--;
    while (b > a && is_space(s[b - 1]))
        b--;
    if (b - a < 2 || (s[b - 2] | 0x20) != 'i' || (s[b - 1] | 0x20) != 'n')
        return 0;
    return b - 2 == a || !is_word(s[b - 3]);
}

typedef struct {
    Py_ssize_t start, end;
    char str, list;
} Lit;

static Py_ssize_t comment_end(const unsigned char *s, Py_ssize_t n, Py_ssize_t i);

/* rewrite_sql.uncommented: each plain comment (not one whose opening slash and star
   are followed by "!" or "M!", which are code, nor by "+", a hint) to one space. NULL
   with nothing to change (no new string); Py_NotImplemented for an unterminated quote,
   which the Python scanner decides. */
static PyObject *
uncommented(const unsigned char *s, Py_ssize_t n)
{
    if (memchr(s, '/', (size_t)n) == NULL && memchr(s, '-', (size_t)n) == NULL
            && memchr(s, '#', (size_t)n) == NULL)
        return NULL;
    char *buf = NULL;
    Py_ssize_t i = 0, from = 0, w = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c == '\'' || c == '"' || c == '`') {
            Py_ssize_t end = quoted(s, n, i, c, c != '`');
            if (end < 0) {
                PyMem_Free(buf);
                return Py_NewRef(Py_NotImplemented);
            }
            i = end;
            continue;
        }
        Py_ssize_t end = comment_end(s, n, i);
        if (end == 0) {
            i++;
            continue;
        }
        if (c == '/' && (s[i + 2] == '!' || s[i + 2] == '+'
                         || (s[i + 2] == 'M' && i + 3 < n && s[i + 3] == '!'))) {
            i = end;  /* code or a hint: kept whole */
            continue;
        }
        if (buf == NULL && (buf = PyMem_Malloc((size_t)n)) == NULL)
            return PyErr_NoMemory();
        memcpy(buf + w, s + from, (size_t)(i - from));
        w += i - from;
        buf[w++] = ' ';
        from = i = end;
    }
    if (buf == NULL)
        return NULL;
    memcpy(buf + w, s + from, (size_t)(n - from));
    w += n - from;
    PyObject *out = PyUnicode_FromStringAndSize(buf, w);
    PyMem_Free(buf);
    return out;
}

/* A comment starting at i: one past its end (a line comment's newline not taken), or 0. */
static Py_ssize_t
comment_end(const unsigned char *s, Py_ssize_t n, Py_ssize_t i)
{
    unsigned char c = s[i];
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
        for (Py_ssize_t k = i + 2; k + 1 < n; k++)
            if (s[k] == '*' && s[k + 1] == '/')
                return k + 2;
        return 0;
    }
    if (c == '-' && i + 1 < n && s[i + 1] == '-'
            && (i + 2 >= n || s[i + 2] == ' ' || s[i + 2] == '\t' || s[i + 2] == '\r' || s[i + 2] == '\n')) {
        while (i < n && s[i] != '\n')
            i++;
        return i;
    }
    if (c == '#') {
        while (i < n && s[i] != '\n')
            i++;
        return i;
    }
    return 0;
}

static PyObject *cut(PyObject *arg);

static PyObject *
fingerprint(PyObject *module, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "fingerprint() takes a str");
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000  /* every str is ready from 3.12 on */
    if (PyUnicode_READY(arg) < 0)
        return NULL;
#endif
    if (!PyUnicode_IS_ASCII(arg))
        Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *s = (const unsigned char *)PyUnicode_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    if (memchr(s, '\0', (size_t)n) != NULL)
        Py_RETURN_NONE;
    PyObject *clean = uncommented(s, n);
    if (clean == NULL)
        return PyErr_Occurred() ? NULL : cut(arg);
    if (clean == Py_NotImplemented)
        return clean;
    PyObject *out = cut(clean);
    Py_DECREF(clean);
    return out;
}

/* The shape and literals of ASCII text without NUL or plain comments. */
static PyObject *
cut(PyObject *arg)
{
    const unsigned char *s = (const unsigned char *)PyUnicode_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    Lit small[32];
    Lit *lits = small;
    Py_ssize_t count = 0, cap = 32, last = 0, i = 0;
    PyObject *out = NULL;
    while (i < n) {
        unsigned char c = s[i];
        int kind = 0;
        Py_ssize_t end = 0;
        switch (c) {
        case '\'': case '"':
            end = quoted(s, n, i, c, 1);
            kind = KIND_Q;
            break;
        case '`':
            end = quoted(s, n, i, c, 0);
            if (end > 0) {  /* an identifier: part of the shape */
                i = end;
                continue;
            }
            break;
        case '/': {
            /* a comment kept (code or a hint: uncommented took the others) is part of the shape */
            Py_ssize_t close = comment_end(s, n, i);
            i = close > 0 ? close : i + 1;
            continue;
        }
        default:
            if (!(is_digit(c) || c == '.' || c == 'x' || c == 'X' || c == 'b' || c == 'B')) {
                i++;
                continue;
            }
            if (!starts_ok(s, i)) {
                i++;
                continue;
            }
            end = hexbit(s, n, i);
            kind = KIND_H;
            if (end == 0 && (is_digit(c) || c == '.')) {
                end = number(s, n, i);
                kind = KIND_N;
            }
            if (end == 0) {
                i++;
                continue;
            }
        }
        if (end < 0) {  /* the expression would backtrack here: the Python scanner decides */
            out = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        Py_ssize_t start = i, piece_end = i;
        if (kind == KIND_N && piece_end > last && s[piece_end - 1] == '-') {
            /* a minus after one of "=<>(," (spaces between) is the number's sign */
            Py_ssize_t m = piece_end - 2;
            while (m >= last && is_space(s[m]))
                m--;
            if (m >= last && strchr("=<>(,", s[m]) != NULL) {
                start--;
                piece_end--;
            }
        }
        if (count > 0 && lits[count - 1].str == (kind == KIND_Q) && list_sep(s, last, piece_end)
                && in_open(s, count > 1 ? lits[count - 2].end : 0, lits[count - 1].start)) {
            /* the next value of a flat IN list: one literal with the values before it */
            lits[count - 1].end = end;
            lits[count - 1].list = 1;
        } else {
            if (count == cap) {
                Lit *grown = PyMem_Malloc(sizeof(Lit) * (size_t)cap * 2);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                memcpy(grown, lits, sizeof(Lit) * (size_t)count);
                if (lits != small)
                    PyMem_Free(lits);
                lits = grown;
                cap *= 2;
            }
            lits[count].start = start;
            lits[count].end = end;
            lits[count].str = kind == KIND_Q;
            lits[count].list = 0;
            count++;
        }
        last = end;
        i = end;
    }
    /* values of mixed kinds: not one list after all (the Python scanner says None) */
    for (Py_ssize_t k = 0; k < count; k++) {
        if (!lits[k].list)
            continue;
        Py_ssize_t a = lits[k].end, b = k + 1 < count ? lits[k + 1].start : n;
        while (a < b && is_space(s[a]))
            a++;
        if (a >= b || s[a] != ')') {
            out = Py_NewRef(Py_None);
            goto done;
        }
    }
    {
        Py_ssize_t taken = 0;
        for (Py_ssize_t k = 0; k < count; k++)
            taken += lits[k].end - lits[k].start;
        PyObject *shape = PyUnicode_New(n - taken + count, 127);
        PyObject *texts = PyTuple_New(count);
        PyObject *strs = PyTuple_New(count);
        if (shape == NULL || texts == NULL || strs == NULL) {
            Py_XDECREF(shape);
            Py_XDECREF(texts);
            Py_XDECREF(strs);
            goto done;
        }
        char *w = (char *)PyUnicode_DATA(shape);
        Py_ssize_t from = 0;
        for (Py_ssize_t k = 0; k < count; k++) {
            memcpy(w, s + from, (size_t)(lits[k].start - from));
            w += lits[k].start - from;
            *w++ = '\0';
            from = lits[k].end;
            PyObject *text = PyUnicode_Substring(arg, lits[k].start, lits[k].end);
            if (text == NULL) {
                Py_DECREF(shape);
                Py_DECREF(texts);
                Py_DECREF(strs);
                goto done;
            }
            PyTuple_SET_ITEM(texts, k, text);
            PyTuple_SET_ITEM(strs, k, Py_NewRef(lits[k].str ? Py_True : Py_False));
        }
        memcpy(w, s + from, (size_t)(n - from));
        out = PyTuple_Pack(3, shape, texts, strs);
        Py_DECREF(shape);
        Py_DECREF(texts);
        Py_DECREF(strs);
    }
done:
    if (lits != small)
        PyMem_Free(lits);
    return out;
}

static PyMethodDef methods[] = {
    {"fingerprint", fingerprint, METH_O,
     "fingerprint(sql) -> (shape, literals, which are strings), None, or NotImplemented"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "lagd statement fingerprint accelerator", -1, methods};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModule_Create(&module);
}
