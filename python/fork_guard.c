// The fork guard: a child forked while another thread held CPython's thread-state list lock starts
// with that lock held, and before CPython 3.12 PyOS_AfterFork_Child takes it before it makes it
// anew, so the child blocks there for good, before any of its code runs (python/cpython#112275;
// fixed in 3.12, and in 3.8.20, 3.9.20, 3.10.15 and 3.11.10: Debian 12's 3.11.2 has it).
// torch's Gloo threads take that lock without the GIL after every collective: dropping a Python
// object, pybind11 makes the thread a thread state first. A DataLoader that forks its workers at
// each epoch's start therefore hangs a training job now and then, for good (its timeout is 0).
// The guard holds the lock across fork(), from pthread_atfork handlers: the fork waits until no
// other thread holds it (kWaitUs at most: a holder that waits for the forking thread's GIL, as
// 3.11's sys._current_frames() can through a collection, would otherwise wait for ever; the fork
// then goes on unguarded, as without hydro), and both processes let it go. C, not C++: CPython's
// internal headers, which name the lock in _PyRuntime, compile only as C.
#include <patchlevel.h>  // PY_VERSION_HEX: CPython's internals only where the lock is to be held
#if PY_VERSION_HEX < 0x030C0000
#define HYDRO_FORK_GUARD_NEEDED 1
#define Py_BUILD_CORE_MODULE 1
#endif
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "fork_guard.h"

#ifdef HYDRO_FORK_GUARD_NEEDED
#include "internal/pycore_runtime.h"

static const PY_TIMEOUT_T kWaitUs = 5 * 1000 * 1000;

static atomic_int g_on;                          // the handlers act (set after g_lock; hydro_fork_guard_set)
static PyThread_type_lock* g_lock;               // &_PyRuntime.interpreters.mutex, once the layout checked out
static _Thread_local PyThread_type_lock g_held;  // what this thread's prepare handler took
// Tests (hydro_fork_guard_test_hold): prepare handlers waiting for the lock, and forks done.
static atomic_int g_waiting;
static atomic_int g_forks;

// The lock is NULL once the runtime is finalized; a fork on another thread at that very moment
// could still read a lock being freed (the interpreter's exit: not guarded against).
static void before_fork(void) {
  g_held = NULL;
  if (!atomic_load(&g_on)) return;
  PyThread_type_lock lock = *g_lock;
  if (!lock) return;
  atomic_fetch_add(&g_waiting, 1);
  if (PyThread_acquire_lock_timed(lock, kWaitUs, 0) == PY_LOCK_ACQUIRED) g_held = lock;
  atomic_fetch_sub(&g_waiting, 1);
}

static void let_go(void) {
  if (g_held) PyThread_release_lock(g_held);
  g_held = NULL;
}

static void after_fork_in_parent(void) {
  let_go();
  atomic_fetch_add(&g_forks, 1);
}

// The running interpreter is one that has the bug: 3.12's fix came to 3.8-3.11 in these releases.
static int has_the_bug(void) {
  int major = 0, minor = 0, micro = 0;
  if (sscanf(Py_GetVersion(), "%d.%d.%d", &major, &minor, &micro) != 3) return 1;
  static const int fixed_micro[] = {20, 20, 15, 10};  // 3.8, 3.9, 3.10, 3.11
  return major == 3 && minor >= 8 && minor <= 11 && micro < fixed_micro[minor - 8];
}

// _PyRuntime as this build's headers lay it out is the running interpreter's: the interpreter list
// found beside the lock is the one the public API returns.
static int layout_matches(void) {
  return _PyRuntime.interpreters.mutex != NULL && _PyRuntime.interpreters.head == PyInterpreterState_Head() &&
         _PyRuntime.interpreters.main == PyInterpreterState_Main();
}

int hydro_fork_guard_install(void) {
  if (g_lock) return HYDRO_FORK_GUARD_ON;
  if (!has_the_bug()) return HYDRO_FORK_GUARD_NOT_NEEDED;
  if (!layout_matches()) return HYDRO_FORK_GUARD_LAYOUT;
  if (pthread_atfork(before_fork, after_fork_in_parent, let_go) != 0) return HYDRO_FORK_GUARD_NO_ATFORK;
  g_lock = &_PyRuntime.interpreters.mutex;
  atomic_store(&g_on, 1);
  return HYDRO_FORK_GUARD_ON;
}

void hydro_fork_guard_set(int on) { atomic_store(&g_on, on && g_lock ? 1 : 0); }

struct holder {
  unsigned max_ms;
  int forks_before;
  int saw_waiter;
  pthread_mutex_t mutex;
  pthread_cond_t held;
  int is_held;
};
static struct holder g_holder;
static pthread_t g_holder_thread;

// What torch's Gloo threads do at the worst moment: hold the lock, without the GIL, until a fork
// waits for it (the guard) or is done (no guard), or MAX_MS.
static void* hold_lock(void* arg) {
  struct holder* h = arg;
  PyThread_type_lock lock = _PyRuntime.interpreters.mutex;
  const int acquired = PyThread_acquire_lock(lock, WAIT_LOCK) == PY_LOCK_ACQUIRED;
  pthread_mutex_lock(&h->mutex);
  h->is_held = acquired ? 1 : -1;
  pthread_cond_signal(&h->held);
  pthread_mutex_unlock(&h->mutex);
  if (!acquired) return NULL;
  const struct timespec ms = {0, 1000000L};
  for (unsigned i = 0; i < h->max_ms; ++i) {
    if (atomic_load(&g_waiting) > 0) {
      h->saw_waiter = 1;
      break;
    }
    if (atomic_load(&g_forks) != h->forks_before) break;
    nanosleep(&ms, NULL);
  }
  PyThread_release_lock(lock);
  return NULL;
}

int hydro_fork_guard_test_hold(unsigned max_ms) {
  if (!layout_matches()) return -1;
  struct holder fresh = {max_ms, atomic_load(&g_forks), 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  g_holder = fresh;
  if (pthread_create(&g_holder_thread, NULL, hold_lock, &g_holder) != 0) return -1;
  pthread_mutex_lock(&g_holder.mutex);
  while (!g_holder.is_held) pthread_cond_wait(&g_holder.held, &g_holder.mutex);
  pthread_mutex_unlock(&g_holder.mutex);
  if (g_holder.is_held > 0) return 0;
  pthread_join(g_holder_thread, NULL);
  return -1;
}

int hydro_fork_guard_test_join(void) {
  pthread_join(g_holder_thread, NULL);
  return g_holder.saw_waiter;
}

#else  // CPython 3.12 and later make the lock anew in a forked child before anything takes it.

int hydro_fork_guard_install(void) { return HYDRO_FORK_GUARD_NOT_NEEDED; }
void hydro_fork_guard_set(int on) { (void)on; }
int hydro_fork_guard_test_hold(unsigned max_ms) {
  (void)max_ms;
  return -1;
}
int hydro_fork_guard_test_join(void) { return 0; }

#endif
