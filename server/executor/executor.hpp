// One allocation's executor process: worker threads that serve a client's
// invocations, plus the main thread that reports accounting to the manager.
//
// The executor is started by the executor manager (forked from its zygote, or
// executed fresh) with a LaunchSpec; users never start it by hand.
//
//   main thread                          worker i (pinned to spec.cores[i])
//   open Fabric                          connect(client, WorkerHello)
//   connect(manager, ExecutorHello)      advertise input slots
//   [atomics: receive the accounting     worker 0: CodeHeader -> RDMA read ->
//    record's advertisement]               checksum -> load from memory
//   start workers                        every worker: Ready
//   every second and at the end:         serve: hot-poll hot_timeout_ms, then
//   fetch_add (atomics) or Accounting      block in wait(); write_imm results
//   message with the increments          until Shutdown / disconnect / crash
#pragma once

#include "common/launch_spec.hpp"
#include "executor/seccomp_filter.hpp"

#include <rdmalib/connection.hpp>
#include <rdmalib/fabric.hpp>

// The executor process's code (this directory) lives in rfaas::executor_process:
// rfaas::executor is the client library's class, and a namespace of the same
// name would make every unqualified use of either ambiguous to a reader.
namespace rfaas::executor_process {

class AccountingLink; // process.hpp

using server::ExecutorExit;
using server::ExitClientLost;
using server::ExitFunctionCrashed;
using server::ExitOk;
using server::ExitRemoteWriteFault;
using server::ExitSetupFailed;
using server::ExitTerminated;

/// Apply the memory limit, open the fabric, serve the allocation, report
/// accounting, and return a server::ExecutorExit code. Never throws: every
/// failure is logged.
/// `opened`, when given, is a Fabric this process opened ahead (a spare
/// executor, see zygote.hpp) on the device of the spec: it is used instead of
/// opening one, with whatever endpoints it prepared. `filter`, when given,
/// is the seccomp filter it compiled ahead (used when it fits the spec).
/// `pooled_link`, when given, is the accounting link that spare connected
/// on `opened` while it waited (AccountingLink::connect_pooled): the manager
/// bound it to this allocation, so it is used instead of connecting one.
int run_executor(const server::LaunchSpec &spec, rdmalib::Fabric *opened = nullptr,
                 const SeccompProgram *filter = nullptr,
                 AccountingLink *pooled_link = nullptr) noexcept;

/// Take SIGTERM and SIGINT on a thread of their own (sigwaitinfo), with both
/// blocked in every other thread, so that they only set the termination flag
/// the executor's setup and loop watch. Why: libfabric's shm provider puts a
/// handler in front at the process's first endpoint (shm 1.17
/// smr_reg_sig_handler) that unlinks every shared-memory region of the process
/// at once and lets it run on. An executor terminated while it connected then
/// left its "map my region" command in the peer's queue naming a region that
/// is gone, and the peer (the executor manager's listener) read a null mapping
/// (docs/BACKEND-BUGS.md, "a peer that vanishes during connection setup").
/// Held, the regions go when the executor closes its endpoints. Call before
/// the process starts any thread (threads inherit the mask); idempotent.
void hold_termination_signals() noexcept;

/// Options of the executor's link to its manager (the accounting link).
rdmalib::ConnectionOptions accounting_link_options();

/// Options of a worker's link to the client, for a request of `input_slots`
/// input slots per worker: the depths decide which endpoint opened ahead
/// (rdmalib::Fabric::prepare) the link can take.
rdmalib::ConnectionOptions worker_link_options(uint32_t input_slots);

} // namespace rfaas::executor_process
