// Copies the store's write-ahead log back into the database file (a SQLite
// checkpoint) on a thread of its own, with a connection of its own, so that
// the loop thread, which commits the grants, never waits for the fsyncs a
// checkpoint makes.
//
// Why a thread and a larger log: SQLite's default checkpoints, every 1000
// pages of log, ran inside the commit that crossed the limit, on the loop
// thread, and cost a third of the resource manager's CPU time per lease
// (reading the log back, writing the database, two fdatasync calls). A
// lease rewrites the same few pages of the lease tables, so a checkpoint
// over a longer log copies hardly more pages than one over a short one:
// checkpointing once per `start_pages` pages copies each hot page once per
// several thousand leases instead of once per hundred.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

struct sqlite3;

namespace rfaas::rm {

/// When the log is copied back, and how large it may grow.
struct CheckpointPolicy {
  /// The thread checkpoints once the log holds this many pages (4 KiB each
  /// by default: 16 MiB).
  int start_pages = 4096;
  /// The writer checkpoints itself, as SQLite would by default, once the
  /// log holds this many pages: the thread fell behind (or is starved).
  /// Bounds the log, unless a reader holds an old snapshot (a long
  /// `.backup`): no checkpoint can pass that reader's snapshot.
  int writer_pages = 32768;
  /// A log that was reset is truncated to at most this size
  /// (journal_size_limit), so a burst does not keep its disk space.
  int64_t keep_bytes = 16 << 20;
};

/// The checkpointing thread. The writer's connection tells it the size of
/// the log after each commit (after_commit(), from SQLite's WAL hook).
///
/// A log starts again from its beginning only at a write that begins when
/// every frame of it has been copied back; with the writer committing
/// again and again, a checkpoint running beside it never quite catches up
/// (each commit adds frames while it copies), and the log would grow until
/// the writer's bound. So a round goes in two steps: the thread copies the
/// log (a PASSIVE checkpoint, which never blocks the writer or a reader;
/// the bulk of the work, both fsyncs of it), then the writer, at its next
/// commit, copies the few frames committed meanwhile (a PASSIVE checkpoint
/// of its own, between two of its transactions), and its next transaction
/// starts the log again.
///
/// Thread-safety: after_commit() is called by the writer's thread only;
/// checkpoints() by any thread.
class Checkpointer {
public:
  /// Opens a connection of its own to `path` (a database already in WAL
  /// mode) and starts the thread. Throws StoreError when it cannot open.
  Checkpointer(const std::string &path, const CheckpointPolicy &policy);
  /// Stops the thread (a checkpoint in progress completes) and closes its
  /// connection.
  ~Checkpointer();
  Checkpointer(const Checkpointer &) = delete;
  Checkpointer &operator=(const Checkpointer &) = delete;

  /// The writer `writer` committed and the log now holds `pages` pages.
  /// Below the policy's start it costs a comparison; above, one wake-up of
  /// the thread per round and, once the thread is done, one small
  /// checkpoint on the writer's connection.
  void after_commit(sqlite3 *writer, int pages);

  /// Checkpoints by the thread so far that copied something (for tests).
  uint64_t checkpoints() const { return checkpoints_.load(std::memory_order_relaxed); }

private:
  void run();

  /// Where a round is: the thread's part is `Copying`, the writer's
  /// `CaughtUp` (its next commit checkpoints).
  enum State : int { Idle, Copying, CaughtUp };

  /// The thread checkpoints again (up to kMaxPasses times) while more
  /// than kLeftToWriter frames were committed during its last pass.
  static constexpr int kMaxPasses = 4;
  static constexpr int kLeftToWriter = 32;

  sqlite3 *db_ = nullptr;
  CheckpointPolicy policy_;
  std::atomic<int> state_{Idle};
  std::atomic<uint64_t> checkpoints_{0};
  std::mutex mutex_;
  /// The thread waits on `wake_` for a round; the writer, past its bound,
  /// on `done_` for the thread's checkpoint to end.
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace rfaas::rm
