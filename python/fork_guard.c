// The fork guard: a child forked while another thread held CPython's thread-state list lock starts
// with that lock held, and before CPython 3.12 PyOS_AfterFork_Child takes it before it makes it
// anew, so the child blocks there forever, before any of its code runs (python/cpython#112275;
// fixed in 3.12, and in 3.8-3.11 only by the releases of September 2024: Debian 12's 3.11.2 has it).
// torch's Gloo threads take that lock without the GIL after every collective: dropping a Python
// object, pybind11 makes the thread a thread state first. A DataLoader that forks its workers at
// each epoch's start therefore hangs a training job now and then, for good (its timeout is 0).
// The guard holds the lock across fork(), from a pthread_atfork handler: the fork waits until no
// other thread holds it, and both processes let it go. C, not C++: CPython's internal headers,
// which name the lock in _PyRuntime, compile only as C.
#include <patchlevel.h>  // PY_VERSION_HEX: CPython's internals only where the lock is to be held
#if PY_VERSION_HEX < 0x030C0000
#define HYDRO_FORK_GUARD_NEEDED 1
#define Py_BUILD_CORE 1
#endif
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>

#include "fork_guard.h"

#ifdef HYDRO_FORK_GUARD_NEEDED
#include "internal/pycore_runtime.h"

static atomic_int g_on;             // the handlers act (hydro_fork_guard_set)
static PyThread_type_lock g_held;   // the lock the prepare handler took, for both sides to let go
static PyThread_type_lock* g_lock;  // &_PyRuntime.interpreters.mutex, once the layout checked out

static void before_fork(void) {
  g_held = NULL;
  if (!g_lock || !atomic_load(&g_on)) return;
  PyThread_type_lock lock = *g_lock;  // NULL once the runtime is finalized
  if (lock && PyThread_acquire_lock(lock, WAIT_LOCK)) g_held = lock;
}

static void after_fork(void) {
  if (g_held) PyThread_release_lock(g_held);
  g_held = NULL;
}

// _PyRuntime as this build's headers lay it out is the running interpreter's: the interpreter list
// found beside the lock is the one the public API returns.
static int layout_matches(void) {
  return _PyRuntime.interpreters.mutex != NULL && _PyRuntime.interpreters.head == PyInterpreterState_Head() &&
         _PyRuntime.interpreters.main == PyInterpreterState_Main();
}

int hydro_fork_guard_install(void) {
  if (g_lock) return HYDRO_FORK_GUARD_ON;
  if (!layout_matches()) return HYDRO_FORK_GUARD_LAYOUT;
  if (pthread_atfork(before_fork, after_fork, after_fork) != 0) return HYDRO_FORK_GUARD_LAYOUT;
  g_lock = &_PyRuntime.interpreters.mutex;
  atomic_store(&g_on, 1);
  return HYDRO_FORK_GUARD_ON;
}

void hydro_fork_guard_set(int on) { atomic_store(&g_on, on ? 1 : 0); }

struct holder {
  unsigned hold_ms;
  pthread_mutex_t mutex;
  pthread_cond_t held;
  int is_held;
};

// What torch's Gloo threads do at the worst moment: hold the lock, without the GIL, for a while.
static void* hold_lock(void* arg) {
  struct holder* h = arg;
  PyThread_type_lock lock = _PyRuntime.interpreters.mutex;
  PyThread_acquire_lock(lock, WAIT_LOCK);
  const unsigned hold_ms = h->hold_ms;
  pthread_mutex_lock(&h->mutex);
  h->is_held = 1;
  pthread_cond_signal(&h->held);
  pthread_mutex_unlock(&h->mutex);  // h is the caller's, gone once it returns
  struct timespec ts = {hold_ms / 1000, (long)(hold_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  PyThread_release_lock(lock);
  return NULL;
}

int hydro_fork_guard_test_hold(unsigned hold_ms) {
  if (!layout_matches()) return -1;
  struct holder h = {hold_ms, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  pthread_t thread;
  if (pthread_create(&thread, NULL, hold_lock, &h) != 0) return -1;
  pthread_detach(thread);
  pthread_mutex_lock(&h.mutex);
  while (!h.is_held) pthread_cond_wait(&h.held, &h.mutex);
  pthread_mutex_unlock(&h.mutex);
  return 0;
}

#else  // CPython 3.12 and later make the lock anew in a forked child before anything takes it.

int hydro_fork_guard_install(void) { return HYDRO_FORK_GUARD_NOT_NEEDED; }
void hydro_fork_guard_set(int on) { (void)on; }
int hydro_fork_guard_test_hold(unsigned hold_ms) {
  (void)hold_ms;
  return -1;
}

#endif
