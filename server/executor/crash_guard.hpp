// Runs a user function so that a fatal signal in it (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGABRT) comes back as a value instead of killing the executor
// silently: the executor can then answer FunctionCrashed to the client and end
// cleanly (the process's memory can no longer be trusted, so it never serves
// another call).
//
// How: process-wide handlers installed once run on a per-thread alternate
// signal stack (a stack overflow in the function still reaches the handler),
// and siglongjmp back into run(). sigsetjmp does not save the signal mask
// (that would be a system call per invocation); the handlers are installed
// with SA_NODEFER instead, so the mask is unchanged when the jump lands.
// A fatal signal outside run() (a bug in the executor itself) goes to the
// handler that was installed before ours (libfabric's shm provider cleans up
// its shared-memory files there), then the default action: the process still
// dies with that signal.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef RFAAS_FUNCTION_NO_ABI_SYMBOL
#define RFAAS_FUNCTION_NO_ABI_SYMBOL
#endif
#include <rfaas/function.hpp>

namespace rfaas::executor_process {

using GuardedFunction = rfaas_function_t;

class CrashGuard {
public:
  /// Install the process-wide handlers, or put them back in front of one a
  /// library installed since (which then runs only for crashes outside
  /// run()). Call it again once the network is set up: libfabric's shm
  /// provider installs a handler that unlinks every shared-memory region of
  /// the process, which a guarded crash must not trigger. Idempotent;
  /// thread-safe. Returns how many other handlers it went in front of.
  /// Throws std::runtime_error if sigaction fails.
  static int install();

  /// Give the calling thread its alternate signal stack. Call once per thread
  /// that uses run(), before the first call. Throws std::runtime_error.
  static void prepare_thread();

  /// Call f(in, size, out, capacity), storing its return value in `result`.
  /// Returns 0, or the number of the fatal signal the function raised. No
  /// allocation, no system call on the normal path.
  static int run(GuardedFunction f, const void *in, uint32_t size, void *out, uint32_t capacity,
                 uint32_t &result) noexcept;

  /// The faulting address (siginfo's si_addr) of the last signal caught by
  /// run() on the calling thread: for SIGSEGV and SIGBUS the memory the
  /// function touched, which tells an overflow into a guard page from other
  /// crashes. Null before any crash.
  static const void *fault_address() noexcept;

  /// Memory that peers write into over the network (a worker's input slots
  /// and the guard pages between them, registered as one region). A SIGSEGV
  /// outside run() at an address inside it was raised by the network
  /// provider carrying out a peer's write into a guard page: shm, tcp and
  /// tcp;ofi_rxm copy a small write-with-immediate into its target
  /// themselves. The provider holds its locks there (shm: a lock in shared
  /// memory that the writer takes next), so the process must neither die
  /// nor jump away: the handler makes that one page writable, counts the
  /// fault and returns, the copy completes into the guard page, and the owner
  /// learns it from faults() and puts the guards back. Only when the page
  /// cannot be opened does the handler end the process with `exit_code`
  /// after one line on stderr. Up to 64 areas at a time; more are not
  /// watched. Unwatched when the object is destroyed, which must happen
  /// before the memory is unmapped.
  class RemoteWriteArea {
  public:
    RemoteWriteArea() noexcept = default;
    RemoteWriteArea(const void *begin, size_t length, int exit_code) noexcept;
    ~RemoteWriteArea();
    RemoteWriteArea(RemoteWriteArea &&o) noexcept;
    RemoteWriteArea &operator=(RemoteWriteArea &&o) noexcept;
    RemoteWriteArea(const RemoteWriteArea &) = delete;
    RemoteWriteArea &operator=(const RemoteWriteArea &) = delete;
    /// False when no entry was free (the area is not watched).
    bool watched() const noexcept { return index_ >= 0; }
    /// Remote writes that faulted in the area since it was watched (one
    /// relaxed load: cheap enough for a polling loop).
    uint32_t faults() const noexcept;
    /// Where the last of them faulted, as an offset into the area.
    size_t last_fault_offset() const noexcept;

  private:
    void release() noexcept;
    int index_ = -1;
  };
};

} // namespace rfaas::executor_process
