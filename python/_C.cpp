// hydro._C: the C++ runtime's objects for Python, and nothing else (the Python side is hydro/*.py).
// Everything that blocks or writes releases the GIL: a checkpoint, a wait for peers, a pause. The
// pause and its release never need the GIL (the handlers and the gate are C++), so a thread paused
// at an operator while holding the GIL is still released.
#include <caffe2/serialize/inline_container.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "bindings.h"
#include "fork_guard.h"
#include "hydro/atomic_file.h"
#include "hydro/dist_env.h"
#include "hydro/exit_codes.h"
#include "hydro/hang_watch.h"
#include "hydro/log.h"
#include "hydro/pause_gate.h"
#include "hydro/resume_choice.h"
#include "hydro/runtime.h"
#include "hydro/version.h"

namespace py = pybind11;

namespace hydro {

void raise_os_error(const Status& s) {
  PyErr_SetString(PyExc_OSError, ("hydro: " + s.to_string()).c_str());
  throw py::error_already_set();
}

void check(const Status& s) {
  if (s.code() == Code::invalid_argument) throw py::value_error("hydro: " + s.to_string());
  if (!s.ok()) raise_os_error(s);
}

namespace {

// "ValueError: what it said", without the traceback pybind11 appends.
std::string error_text(const py::error_already_set& e) {
  return py::str(e.type().attr("__name__")).cast<std::string>() + ": " + py::str(e.value()).cast<std::string>();
}

// A Python callable kept by C++ code that may drop it without the GIL.
std::shared_ptr<py::object> hold(py::object fn) {
  return std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// The file-like object torch.save writes into: every write() goes straight to hydro's file (hashed,
// written behind, fsynced later), with the GIL released. Valid only during the call it is given to.
class Sink {
 public:
  explicit Sink(const ByteSink* append) : append_(append) {}
  size_t write(const py::buffer& data) {
    py::buffer_info b = data.request();
    const size_t n = static_cast<size_t>(b.size * b.itemsize);
    if (!append_) throw py::value_error("hydro: this checkpoint file is closed");
    if (!error_.ok()) raise_os_error(error_);
    {
      py::gil_scoped_release nogil;
      error_ = (*append_)(b.ptr, n);
    }
    if (!error_.ok()) raise_os_error(error_);
    return n;
  }
  void detach() { append_ = nullptr; }
  const Status& error() const { return error_; }

 private:
  const ByteSink* append_;
  Status error_;
};

// `fill(sink)` in Python as a StreamWriter: a Python exception becomes an io Status with its text;
// a failed write is reported as itself (it names the file).
StreamWriter stream_writer(py::function fill) {
  return [fn = hold(std::move(fill))](const ByteSink& append) -> Status {
    py::gil_scoped_acquire gil;
    auto sink = std::make_shared<Sink>(&append);
    Status st;
    try {
      (*fn)(py::cast(sink));
    } catch (py::error_already_set& e) {
      st = sink->error().ok() ? Status::io(error_text(e)) : sink->error();
    }
    sink->detach();
    return st.ok() ? sink->error() : st;
  };
}

std::function<void(const std::string&)> path_reader(py::function read) {
  return [fn = hold(std::move(read))](const std::string& path) {
    py::gil_scoped_acquire gil;
    try {
      (*fn)(path);
    } catch (py::error_already_set& e) {
      throw std::runtime_error(error_text(e));
    }
  };
}

// `compose(staging, files)` in Python, returning bytes (b"": no file), as a Composer.
Composer composer(py::function compose) {
  return [fn = hold(std::move(compose))](const std::string& staging, const std::vector<std::string>& files,
                                         std::string* bytes) -> Status {
    py::gil_scoped_acquire gil;
    try {
      *bytes = (*fn)(staging, files).cast<std::string>();
    } catch (py::error_already_set& e) {
      return Status::io(error_text(e));
    } catch (const py::cast_error& e) {
      return Status::io(std::string("the composer returned no bytes: ") + e.what());
    }
    return Status::OK();
  };
}

// Async checkpoints of Python objects. On the training thread, hydro/snapshot.py copies the state's
// tensors into reused CPU buffers and pickles the structure exactly as torch.save does, keeping each
// record of the zip file torch.save would write: ("data.pkl", bytes) or ("data/N", address, size) of
// a copied storage. Here, on the background thread and without the GIL, the records become that
// zip file through libtorch's own writer (CRC32 and all). `keep` holds the copies until then.
// Python may instead hand over the whole file, serialized in memory: ("bytes", data), or a function
// that writes the file from copies it holds, called here with the GIL: ("stream", write).
struct ZipRecord {
  std::string name, bytes;
  const void* data = nullptr;
  size_t size = 0;
};

StreamWriter zip_writer(std::vector<ZipRecord> records, std::shared_ptr<py::object> keep) {
  return [records = std::move(records), keep](const ByteSink& sink) -> Status {
    Status st;
    try {
      // Always "written": a short count makes libtorch throw, and its destructor then throws
      // again while unwinding (std::terminate). The first failure is kept, later bytes dropped.
      caffe2::serialize::PyTorchStreamWriter zip([&](const void* d, size_t n) -> size_t {
        if (st.ok()) st = sink(d, n);
        return n;
      });
      for (const auto& r : records)
        zip.writeRecord(r.name, r.data ? r.data : r.bytes.data(), r.data ? r.size : r.bytes.size());
      zip.writeEndOfFile();
    } catch (const c10::Error& e) {
      return st.ok() ? Status::io(std::string("writing the zip file: ") + e.what_without_backtrace()) : st;
    }
    return st;
  };
}

std::function<StreamWriter()> capturer(py::function capture, StreamWriter write) {
  return [fn = hold(std::move(capture)), write]() -> StreamWriter {
    py::gil_scoped_acquire gil;
    py::tuple got = (*fn)();
    if (got[0].cast<std::string>() == "write") return write;  // a sync save's: torch's own, streamed
    if (got[0].cast<std::string>() == "stream") return stream_writer(got[1].cast<py::function>());
    if (got[0].cast<std::string>() == "bytes") {
      auto bytes = std::make_shared<std::string>(got[1].cast<std::string>());
      return [bytes](const ByteSink& sink) { return sink(bytes->data(), bytes->size()); };
    }
    std::vector<ZipRecord> records;
    for (auto r : got[1]) {
      auto t = r.cast<py::tuple>();
      ZipRecord z{t[0].cast<std::string>(), "", nullptr, 0};
      if (t.size() == 2)
        z.bytes = t[1].cast<std::string>();
      else
        z.data = reinterpret_cast<const void*>(t[1].cast<uintptr_t>()), z.size = t[2].cast<size_t>();
      records.push_back(std::move(z));
    }
    return zip_writer(std::move(records), hold(got[2]));
  };
}

py::dict settings_dict(const Settings& s) {
  py::dict d;
  d["pause"] = s.pause;
  d["checkpoint_dir"] = s.checkpoint_dir;
  d["resume_from"] = s.resume_from;
  d["checkpoint_every"] = s.checkpoint_every;
  d["keep_last"] = s.keep_last;
  d["mode"] = std::string(mode_name(s.mode));
  d["rank"] = s.rank;
  d["world_size"] = s.world_size;
  d["suspend_checkpoint"] = s.suspend_checkpoint;
  d["suspend_grace_s"] = s.suspend_grace_s;
  d["copy_behind"] = s.copy_behind;
  d["store_timeout_s"] = s.store_timeout_s;
  d["checkpoint_failure_grace_s"] = s.checkpoint_failure_grace_s;
  return d;
}

void bind_runtime(py::module_& m) {
  py::class_<Runtime, std::unique_ptr<Runtime, ReleaseGilDelete>>(m, "Runtime")
      .def(py::init([] {
        py::gil_scoped_release nogil;  // may connect to the ranks' store
        return std::unique_ptr<Runtime, ReleaseGilDelete>(new Runtime());
      }))
      .def(
          "track_stream",
          [](Runtime& rt, const std::string& name, py::function write, py::function read, py::object capture) {
            StreamWriter writer = stream_writer(std::move(write));
            rt.track_stream(name, writer, path_reader(std::move(read)),
                            capture.is_none() ? nullptr : capturer(capture.cast<py::function>(), writer));
          },
          py::arg("name"), py::arg("write"), py::arg("read"), py::arg("capture") = py::none())
      .def(
          "compose_dcp_metadata",
          [](Runtime& rt, py::function compose) { rt.compose_dcp_metadata(composer(std::move(compose))); },
          py::arg("compose"))
      .def("resume", &Runtime::resume, py::call_guard<py::gil_scoped_release>())
      .def("allow_reshard", &Runtime::allow_reshard)
      .def("every_rank_writes", &Runtime::every_rank_writes, py::call_guard<py::gil_scoped_release>())
      .def("step_end", &Runtime::step_end, py::arg("step"), py::call_guard<py::gil_scoped_release>())
      .def(
          "watch_collectives",
          [](Runtime& rt, double seconds) {
            rt.watch_collectives(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
          },
          py::arg("seconds"), py::call_guard<py::gil_scoped_release>())
      .def("save", &Runtime::save, py::arg("step"), py::arg("keep_always") = false,
           py::call_guard<py::gil_scoped_release>())
      .def("wait_idle", &Runtime::wait_idle, py::call_guard<py::gil_scoped_release>())
      .def("copy_behind", &Runtime::copy_behind)
      .def("wait_copies", &Runtime::wait_copies, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("writes_checkpoints", &Runtime::writes_checkpoints)
      .def_property("epoch", &Runtime::epoch, &Runtime::set_epoch)
      .def_property_readonly("settings", [](const Runtime& rt) { return settings_dict(rt.settings()); });
}

// SIGTERM in a DataLoader worker of a hydro job: from the parent (the loader shutting its worker
// down) it ends the worker, as torch's own handler does; from anyone else (Slurm signals every
// process of the step) it is left to the training process, which checkpoints and then ends its
// workers. torch's handler would let the worker die of it, and the loader would then fail the step.
std::atomic<pid_t> g_training_pid{0};  // 0: the worker's parent (fork); else as given (spawn, forkserver)

void worker_sigterm(int, siginfo_t* info, void*) {
  const pid_t training = g_training_pid.load(std::memory_order_relaxed);
  if (info->si_pid == (training ? training : ::getppid())) ::_exit(0);
}

void leave_sigterm_to_parent(pid_t training_pid) {
  g_training_pid.store(training_pid);
  struct sigaction sa {};
  sa.sa_sigaction = worker_sigterm;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGTERM, &sa, nullptr) != 0) raise_os_error(Status::from_errno(errno, "sigaction SIGTERM"));
}

// What Python's checkpoints write through: atomic files (the copies: tensor_copies.cpp).
void bind_checkpoint_io(py::module_& m) {
  m.def(
      "atomic_write",
      [](const std::string& path, py::function fill) {
        StreamWriter write = stream_writer(std::move(fill));
        Status st;
        {
          py::gil_scoped_release nogil;
          st = write_file_atomic(
              path, [&](WritableFile& f) { return write([&](const void* d, size_t n) { return f.append(d, n); }); });
        }
        if (Status s = warn_if_durability_uncertain(st); !s.ok()) raise_os_error(s);
      },
      py::arg("path"), py::arg("fill"));
}

void bind_functions(py::module_& m) {
  m.def("leave_sigterm_to_parent", &leave_sigterm_to_parent, py::arg("training_pid") = 0);
  m.attr("EXIT_REQUEUE") = kExitRequeue;
  m.attr("EXIT_WATCHDOG") = kExitWatchdog;
  m.attr("__version__") = hydro::version();
  m.def(
      "log", [](const std::string& msg) { log(msg); }, py::arg("message"));
  m.def("log_line", &log_line, py::arg("who"), py::arg("message"));
  m.def("dist_env", [] {
    DistEnv env;
    Status st = DistEnv::from_env(&env);
    if (!st.ok()) throw py::value_error("hydro: " + st.to_string());
    py::dict d;
    d["rank"] = env.rank;
    d["world_size"] = env.world_size;
    d["local_rank"] = env.local_rank;
    d["master_addr"] = env.master_addr;
    d["master_port"] = env.master_port;
    return d;
  });
  m.def("start_pause_only", &start_pause_only, py::call_guard<py::gil_scoped_release>());
  m.attr("HOLD_PROOF_SECONDS") = std::chrono::duration_cast<std::chrono::seconds>(kHoldProof).count();
  m.def("pause_enabled", [] {
    bool pause = true;
    return Settings::pause_from_env(&pause).ok() && pause;
  });
  m.def("arm_pause_now", &arm_pause_now, py::arg("signo"));
  m.def("track_process_group", &track_process_group, py::arg("name"));
  m.def(
      "rank_files",
      [](const std::string& path) {
        std::vector<std::string> files;
        check(rank_files(posix_fs(), path, &files));
        return files;
      },
      py::arg("path"));
  m.def("pause_signals", &pause_signals_from_env);
  m.def("signal_handlers_installed", &SignalBridge::running);
  m.def("reclaim_signal_handlers", &SignalBridge::reclaim);
  m.def(
      "signal_is_default",
      [](int signo) {  // the process's own disposition, which Python's signal.getsignal() may not know
        struct sigaction now {};
        return ::sigaction(signo, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL;
      },
      py::arg("signo"));
  m.def("operator_pause_armed", &operator_pause_armed);
  m.def("drains_cuda_on_pause", &drains_cuda_on_pause);
  m.def("pause_state", [] {
    PauseGate& g = PauseGate::instance();
    py::dict d;
    d["pending"] = g.pause_pending();
    d["armed"] = operator_pause_armed();
    d["threads_waiting"] = g.threads_waiting();
    d["exit_requested"] = g.exit_requested();
    d["last_block_ns"] = g.last_block_ns();  // steady clock: time.monotonic_ns()
    d["last_release_ns"] = g.last_release_ns();
    return d;
  });
}

// The fork guard, installed as the module loads (fork_guard.h); the underscored ones are for tests.
void bind_fork_guard(py::module_& m) {
  const int state = hydro_fork_guard_install();
  m.def("fork_guard", [state] {
    switch (state) {
      case HYDRO_FORK_GUARD_ON: return "on: fork() holds CPython's thread-state list lock (python/cpython#112275)";
      case HYDRO_FORK_GUARD_NOT_NEEDED: return "not needed: this CPython makes that lock anew in a forked child first";
      case HYDRO_FORK_GUARD_NO_ATFORK: return "off: pthread_atfork failed";
      default: return "off: CPython's _PyRuntime is not laid out as the headers hydro was built with say";
    }
  });
  m.def("_set_fork_guard", &hydro_fork_guard_set, py::arg("on"));
  m.def(
      "_hold_thread_state_lock", [](unsigned max_ms) { return hydro_fork_guard_test_hold(max_ms) == 0; },
      py::arg("max_ms"));
  m.def(
      "_join_thread_state_lock_holder", [] { return hydro_fork_guard_test_join() == 1; },
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace
}  // namespace hydro

PYBIND11_MODULE(_C, m) {
  m.doc() = "hydro's C++ runtime (use the hydro package, not this module)";
  py::class_<hydro::Sink, std::shared_ptr<hydro::Sink>>(m, "Sink")
      .def("write", &hydro::Sink::write)
      .def("flush", [](hydro::Sink&) {})
      .def("writable", [](hydro::Sink&) { return true; });
  hydro::bind_runtime(m);
  hydro::bind_data(m);
  hydro::bind_functions(m);
  hydro::bind_checkpoint_io(m);
  hydro::bind_tensor_copies(m);
  hydro::bind_checkpoint_dir(m);
  hydro::bind_job(m);
  hydro::bind_fork_guard(m);
}
