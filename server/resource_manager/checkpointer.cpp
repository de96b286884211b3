#include "resource_manager/checkpointer.hpp"

#include <chrono>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include "resource_manager/store.hpp"

namespace rfaas::rm {

Checkpointer::Checkpointer(const std::string &path, const CheckpointPolicy &policy)
    : policy_(policy) {
  int rc =
      sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError("cannot open " + path + " for checkpoints: " + msg);
  }
  // Its own checkpoints only: closing this connection must not try one.
  sqlite3_wal_autocheckpoint(db_, 0);
  // A connection checkpoints only once it has opened the log, which it
  // does at its first read.
  if (sqlite3_exec(db_, "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, nullptr) !=
      SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError("cannot read " + path + " for checkpoints: " + msg);
  }
  sqlite3_exec(db_, ("PRAGMA journal_size_limit=" + std::to_string(policy_.keep_bytes)).c_str(),
               nullptr, nullptr, nullptr);
  thread_ = std::thread([this] { run(); });
}

Checkpointer::~Checkpointer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
  sqlite3_close(db_);
}

void Checkpointer::after_commit(sqlite3 *writer, int pages) {
  if (pages >= policy_.writer_pages) {
    // The thread fell behind (the writer commits faster than it copies,
    // or a reader holds an old snapshot): the writer waits for the
    // thread's checkpoint to end (it holds the checkpoint lock) and copies
    // the rest itself, as SQLite would by default.
    if (state_.load(std::memory_order_acquire) == Copying) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait_for(lock, std::chrono::seconds(1),
                     [this] { return state_.load(std::memory_order_acquire) != Copying; });
    }
    sqlite3_wal_checkpoint_v2(writer, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    if (state_.load(std::memory_order_acquire) == CaughtUp)
      state_.store(Idle, std::memory_order_relaxed);
    return;
  }
  if (pages < policy_.start_pages) {
    // The log started again (or has not grown yet): the round is over.
    if (state_.load(std::memory_order_relaxed) == CaughtUp)
      state_.store(Idle, std::memory_order_relaxed);
    return;
  }
  switch (state_.load(std::memory_order_acquire)) {
  case Idle:
    state_.store(Copying, std::memory_order_relaxed);
    // Under the lock, so that the thread cannot miss it between its check
    // and its wait.
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_one();
    return;
  case Copying:
    return;
  case CaughtUp:
    // The frames committed since the thread's checkpoint began; the next
    // transaction then starts the log again. A reader on an old snapshot
    // (SQLITE_BUSY, or frames left) keeps the log: the next commit starts
    // a new round.
    sqlite3_wal_checkpoint_v2(writer, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    state_.store(Idle, std::memory_order_relaxed);
    return;
  }
}

void Checkpointer::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock,
                 [this] { return stop_ || state_.load(std::memory_order_acquire) == Copying; });
      if (stop_)
        return;
    }
    // Again while the writer committed much during the last pass: what is
    // left for the writer's own checkpoint (and its fsyncs, on the loop
    // thread) is then a few frames.
    for (int pass = 0; pass < kMaxPasses; ++pass) {
      int log = 0, copied = 0;
      const int rc =
          sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
      if (rc != SQLITE_OK) {
        // A failed checkpoint loses nothing (the log still holds every
        // commit); the writer's bound keeps the log finite meanwhile.
        if (rc != SQLITE_BUSY)
          if (auto l = spdlog::get("resource_manager"))
            l->warn("database checkpoint failed: {}", sqlite3_errmsg(db_));
        break;
      }
      if (copied > 0)
        checkpoints_.fetch_add(1, std::memory_order_relaxed);
      if (log - copied <= kLeftToWriter)
        break;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      state_.store(CaughtUp, std::memory_order_release);
    }
    done_.notify_one();
  }
}

} // namespace rfaas::rm
