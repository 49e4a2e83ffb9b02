/*
 * Optional accelerator for prefetch/stall.py: read_batch(fds, n, interval)
 * takes n samples of already-open /proc files, `interval` seconds apart, with
 * the GIL released for the whole batch.
 *
 * Why: the stall sampler reads four files of each applier thread and
 * /proc/stat 50 times a second. From Python each pread and each wait gives the
 * GIL back and takes it again, and while the event loop runs each taking-back
 * waits for it and switches threads: six GIL hand-offs a sample, and in a
 * catch-up a sample cost 150-200 µs of lagd's CPU against 26 µs offline
 * (docs/benchmarks.md, 2026-12-07). Here a batch of samples is one hand-off;
 * the texts are then parsed in Python, one after another, as before.
 *
 * Each file is read at offset 0 (/proc makes its text afresh for such a read),
 * up to BUF bytes, exactly as ProcFiles.read_many's os.pread(fd, 4096, 0); a
 * file that cannot be read (its thread gone) or an fd of -1 gives None.
 * Timestamps are CLOCK_MONOTONIC, the clock of time.monotonic().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#define BUF 4096
#define MAX_SAMPLES 64
/* Files times samples of one call, each read into its own BUF: 16 MB at most.
   Exported as MAX_CELLS: the sampler keeps its batches under it. */
#define MAX_CELLS 4096

static void sleep_for(double seconds)
{
    struct timespec ts;
    if (seconds <= 0)
        return;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static PyObject *read_batch(PyObject *self, PyObject *args)
{
    PyObject *fds_obj;
    int n;
    double interval;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!id", &PyTuple_Type, &fds_obj, &n, &interval))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(fds_obj);
    if (n < 1 || n > MAX_SAMPLES || k > MAX_CELLS / n || !(interval >= 0 && interval < 60)) {
        PyErr_SetString(PyExc_ValueError, "read_batch: too many files or samples, or a bad interval");
        return NULL;
    }
    int fds[MAX_CELLS];
    for (Py_ssize_t i = 0; i < k; i++) {
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(fds_obj, i));
        if (fd == -1 && PyErr_Occurred())
            return NULL;
        fds[i] = fd < 0 || fd > INT_MAX ? -1 : (int)fd;
    }
    size_t cells = (size_t)n * (size_t)(k ? k : 1);
    char *buf = PyMem_RawMalloc(cells * BUF);
    ssize_t *lens = PyMem_RawMalloc(cells * sizeof(ssize_t));
    double *at = PyMem_RawMalloc((size_t)n * sizeof(double));
    if (buf == NULL || lens == NULL || at == NULL) {
        PyMem_RawFree(buf);
        PyMem_RawFree(lens);
        PyMem_RawFree(at);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (int s = 0; s < n; s++) {
        struct timespec now;
        sleep_for(interval);
        clock_gettime(CLOCK_MONOTONIC, &now);
        at[s] = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
        for (Py_ssize_t i = 0; i < k; i++) {
            size_t c = (size_t)s * (size_t)k + (size_t)i;
            lens[c] = fds[i] < 0 ? -1 : pread(fds[i], buf + c * BUF, BUF, 0);
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto done;
    for (int s = 0; s < n; s++) {
        PyObject *texts = PyTuple_New(k);
        PyObject *t = PyFloat_FromDouble(at[s]);
        PyObject *pair = texts && t ? PyTuple_Pack(2, t, texts) : NULL;
        Py_XDECREF(t);
        if (pair == NULL) {
            Py_XDECREF(texts);
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, s, pair);
        for (Py_ssize_t i = 0; i < k; i++) {
            size_t c = (size_t)s * (size_t)k + (size_t)i;
            PyObject *text;
            if (lens[c] < 0) {
                text = Py_NewRef(Py_None);
            } else {
                text = PyUnicode_DecodeASCII(buf + c * BUF, lens[c], "replace");
                if (text == NULL) {
                    Py_DECREF(texts);
                    Py_CLEAR(out);
                    goto done;
                }
            }
            PyTuple_SET_ITEM(texts, i, text);
        }
        Py_DECREF(texts);
    }
done:
    PyMem_RawFree(buf);
    PyMem_RawFree(lens);
    PyMem_RawFree(at);
    return out;
}

static PyMethodDef methods[] = {
    {"read_batch", read_batch, METH_VARARGS,
     "read_batch(fds, n, interval) -> [(monotonic, (text or None, ...)), ...]: n samples of the "
     "open files, interval seconds apart (a wait before each), the GIL released throughout."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_procread", "lagd /proc sampler accelerator", -1, methods};

PyMODINIT_FUNC
PyInit__procread(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_CELLS", MAX_CELLS) < 0)
        Py_CLEAR(m);
    return m;
}
