#include "resource_manager/store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

namespace rfaas::rm {

/// Prepared statements kept for the life of the connection, by their text:
/// preparing one costs more than running it (a lease writes three rows).
class StatementCache {
public:
  ~StatementCache() {
    for (auto &[sql, st] : statements_)
      sqlite3_finalize(st);
  }
  /// The statement for `sql`, prepared on first use; reset and unbound.
  sqlite3_stmt *get(sqlite3 *db, const char *sql) {
    auto it = statements_.find(sql);
    if (it != statements_.end())
      return it->second;
    sqlite3_stmt *st = nullptr;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) != SQLITE_OK)
      throw StoreError(std::string("SQLite: preparing \"") + sql + "\": " + sqlite3_errmsg(db));
    statements_.emplace(sql, st);
    return st;
  }

private:
  std::unordered_map<std::string, sqlite3_stmt *> statements_;
};

namespace {

/// One prepared statement, taken from the cache (reset on scope exit) or,
/// without one, prepared here and finalised on scope exit.
class Stmt {
public:
  Stmt(sqlite3 *db, const char *sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
      throw StoreError(std::string("SQLite: preparing \"") + sql + "\": " + sqlite3_errmsg(db));
  }
  Stmt(sqlite3 *db, StatementCache &cache, const char *sql)
      : db_(db), st_(cache.get(db, sql)), cached_(true) {}
  ~Stmt() {
    if (cached_) {
      sqlite3_reset(st_);
      sqlite3_clear_bindings(st_);
    } else {
      sqlite3_finalize(st_);
    }
  }
  Stmt(const Stmt &) = delete;
  Stmt &operator=(const Stmt &) = delete;

  void bind(int i, int64_t v) { check(sqlite3_bind_int64(st_, i, v)); }
  void bind(int i, uint64_t v) { bind(i, static_cast<int64_t>(v)); }
  void bind(int i, const std::string &v) {
    check(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  void bind_blob(int i, const void *p, size_t n) {
    check(sqlite3_bind_blob(st_, i, p, static_cast<int>(n), SQLITE_TRANSIENT));
  }
  void bind(int i, const std::optional<uint64_t> &v) {
    if (v)
      bind(i, *v);
    else
      check(sqlite3_bind_null(st_, i));
  }
  /// true: a row is ready; false: done.
  bool step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW)
      return true;
    if (rc == SQLITE_DONE)
      return false;
    throw StoreError(std::string("SQLite: ") + sqlite3_errmsg(db_));
  }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  void run() {
    while (step()) {
    }
  }
  int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  uint64_t u64(int c) const { return static_cast<uint64_t>(i64(c)); }
  std::string text(int c) const {
    const unsigned char *t = sqlite3_column_text(st_, c);
    return t ? std::string(reinterpret_cast<const char *>(t),
                           static_cast<size_t>(sqlite3_column_bytes(st_, c)))
             : std::string();
  }
  bool is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  std::optional<uint64_t> opt_u64(int c) const {
    if (sqlite3_column_type(st_, c) == SQLITE_NULL)
      return std::nullopt;
    return u64(c);
  }
  std::string blob(int c) const {
    const void *b = sqlite3_column_blob(st_, c);
    return b ? std::string(static_cast<const char *>(b),
                           static_cast<size_t>(sqlite3_column_bytes(st_, c)))
             : std::string();
  }

private:
  void check(int rc) {
    if (rc != SQLITE_OK)
      throw StoreError(std::string("SQLite: binding: ") + sqlite3_errmsg(db_));
  }
  sqlite3 *db_;
  sqlite3_stmt *st_ = nullptr;
  bool cached_ = false;
};

/// Runs `sql`, a statement without results, prepared once in `cache`: a
/// lease's transaction control (BEGIN, SAVEPOINT, RELEASE, COMMIT) runs
/// several times per lease, and parsing it each time was a tenth of the
/// resource manager's time per lease. Throws StoreError naming the statement.
void run_cached(sqlite3 *db, StatementCache &cache, const char *sql) {
  sqlite3_stmt *st = cache.get(db, sql);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
  }
  sqlite3_reset(st);
  if (rc != SQLITE_DONE)
    throw StoreError(std::string("SQLite: ") + sql + ": " + sqlite3_errmsg(db));
}

/// BEGIN IMMEDIATE ... COMMIT, rolled back if not committed. Inside a batch
/// (Store::begin_batch) a savepoint instead: a write that fails is undone
/// alone, and the batch's COMMIT makes the others durable.
class Transaction {
public:
  Transaction(sqlite3 *db, StatementCache &cache, bool nested)
      : db_(db), cache_(cache), nested_(nested) {
    run_cached(db_, cache_, nested_ ? "SAVEPOINT w" : "BEGIN IMMEDIATE");
  }
  ~Transaction() {
    if (done_)
      return;
    if (nested_) {
      sqlite3_exec(db_, "ROLLBACK TO w", nullptr, nullptr, nullptr);
      sqlite3_exec(db_, "RELEASE w", nullptr, nullptr, nullptr);
    } else {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }
  void commit() {
    run_cached(db_, cache_, nested_ ? "RELEASE w" : "COMMIT");
    done_ = true;
  }

private:
  sqlite3 *db_;
  StatementCache &cache_;
  bool nested_;
  bool done_ = false;
};

std::string join_cores(const std::vector<uint32_t> &cores) {
  std::string s;
  for (uint32_t c : cores) {
    if (!s.empty())
      s += ',';
    s += std::to_string(c);
  }
  return s;
}

std::vector<uint32_t> split_cores(const std::string &s) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos)
      comma = s.size();
    out.push_back(static_cast<uint32_t>(std::stoul(s.substr(pos, comma - pos))));
    pos = comma + 1;
  }
  return out;
}

// Each entry migrates from version i to i+1. Never edit a shipped entry: add one.
const char *const kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE nodes ("
    "  name TEXT PRIMARY KEY, address TEXT NOT NULL, cores INTEGER NOT NULL,"
    "  memory_mib INTEGER NOT NULL, secret BLOB NOT NULL, state TEXT NOT NULL,"
    "  drained INTEGER NOT NULL, registered_ms INTEGER NOT NULL,"
    "  last_heartbeat_ms INTEGER NOT NULL);"
    "CREATE TABLE leases ("
    "  id INTEGER PRIMARY KEY, client TEXT NOT NULL, state TEXT NOT NULL,"
    "  granted_ms INTEGER NOT NULL, expiry_ms INTEGER NOT NULL, ended_ms INTEGER NOT NULL);"
    "CREATE INDEX leases_state ON leases(state);"
    "CREATE TABLE lease_parts ("
    "  lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL, node TEXT NOT NULL, cores TEXT NOT NULL,"
    "  memory_mib INTEGER NOT NULL, PRIMARY KEY (lease_id, idx));"
    "CREATE TABLE accounting ("
    "  lease_id INTEGER NOT NULL, node TEXT NOT NULL, client TEXT NOT NULL,"
    "  reported_ms INTEGER NOT NULL, allocation_us INTEGER NOT NULL,"
    "  hot_polling_us INTEGER NOT NULL, execution_us INTEGER NOT NULL,"
    "  memory_mib INTEGER NOT NULL, final INTEGER NOT NULL,"
    "  PRIMARY KEY (lease_id, node));"
    "CREATE INDEX accounting_client ON accounting(client);",
    // 1 -> 2: lease secrets (leases granted before have none: they can only
    // be revoked) and the last signed registration time (replays after a
    // restart).
    "ALTER TABLE leases ADD COLUMN secret_hash BLOB NOT NULL DEFAULT x'';"
    "ALTER TABLE nodes ADD COLUMN registration_signed_ms INTEGER NOT NULL DEFAULT 0;",
    // 2 -> 3: the lease's owner as authenticated (MUNGE uid, 4294967295 for
    // anonymous, what leases granted before were) and SLURM job id, on the
    // lease and on its accounting; and quotas set through REST (user '' is
    // the default; NULL: that field is not overridden).
    "ALTER TABLE leases ADD COLUMN owner_uid INTEGER NOT NULL DEFAULT 4294967295;"
    "ALTER TABLE leases ADD COLUMN job_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE accounting ADD COLUMN owner_uid INTEGER NOT NULL DEFAULT 4294967295;"
    "ALTER TABLE accounting ADD COLUMN job_id TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE quotas ("
    "  user TEXT PRIMARY KEY, cores INTEGER, memory_mib INTEGER, leases INTEGER,"
    "  requests_per_minute INTEGER);",
    // 3 -> 4: indexes for what runs per registration (a node's ended leases,
    // which otherwise scanned the whole lease history) and for the hourly
    // retention prune (which otherwise scanned leases and accounting).
    "CREATE INDEX lease_parts_node ON lease_parts(node);"
    "CREATE INDEX leases_ended ON leases(ended_ms);"
    "CREATE INDEX accounting_reported ON accounting(reported_ms);",
    // 4 -> 5: fewer pages written per lease (each is a 4 KiB frame of the
    // log). lease_parts and accounting are keyed by their primary keys
    // (WITHOUT ROWID: no separate index for the key); the active leases
    // are a partial index (a grant adds one entry, an end removes it,
    // instead of moving an entry of an index over every lease's state); the
    // end time is indexed only once a lease ended (a grant touches nothing
    // there).
    "CREATE TABLE lease_parts_5 ("
    "  lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL, node TEXT NOT NULL, cores TEXT NOT NULL,"
    "  memory_mib INTEGER NOT NULL, PRIMARY KEY (lease_id, idx)) WITHOUT ROWID;"
    "INSERT INTO lease_parts_5 (lease_id, idx, node, cores, memory_mib)"
    "  SELECT lease_id, idx, node, cores, memory_mib FROM lease_parts;"
    "DROP TABLE lease_parts;"
    "ALTER TABLE lease_parts_5 RENAME TO lease_parts;"
    "CREATE INDEX lease_parts_node ON lease_parts(node);"
    "CREATE TABLE accounting_5 ("
    "  lease_id INTEGER NOT NULL, node TEXT NOT NULL, client TEXT NOT NULL,"
    "  reported_ms INTEGER NOT NULL, allocation_us INTEGER NOT NULL,"
    "  hot_polling_us INTEGER NOT NULL, execution_us INTEGER NOT NULL,"
    "  memory_mib INTEGER NOT NULL, final INTEGER NOT NULL,"
    "  owner_uid INTEGER NOT NULL DEFAULT 4294967295, job_id TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (lease_id, node)) WITHOUT ROWID;"
    "INSERT INTO accounting_5 (lease_id, node, client, reported_ms, allocation_us,"
    "  hot_polling_us, execution_us, memory_mib, final, owner_uid, job_id)"
    "  SELECT lease_id, node, client, reported_ms, allocation_us, hot_polling_us,"
    "  execution_us, memory_mib, final, owner_uid, job_id FROM accounting;"
    "DROP TABLE accounting;"
    "ALTER TABLE accounting_5 RENAME TO accounting;"
    "CREATE INDEX accounting_client ON accounting(client);"
    "CREATE INDEX accounting_reported ON accounting(reported_ms);"
    "DROP INDEX leases_state;"
    "CREATE INDEX leases_active ON leases(id) WHERE state = 'active';"
    "DROP INDEX leases_ended;"
    "CREATE INDEX leases_ended ON leases(ended_ms) WHERE state != 'active';",
    // 5 -> 6: the grant journal's last sequence number this file holds
    // (grant_journal.hpp), stored with every commit: a record at or below
    // it is already here.
    "CREATE TABLE grant_journal (id INTEGER PRIMARY KEY CHECK (id = 0),"
    "  applied INTEGER NOT NULL);"
    "INSERT INTO grant_journal (id, applied) VALUES (0, 0);",
    // 6 -> 7: the latest expiry any token of a lease carried (a renewal may
    // shorten expiry_ms, and a node keeps a lease's end until its tokens
    // have all expired). 0: not known (leases granted before).
    "ALTER TABLE leases ADD COLUMN tokens_until_ms INTEGER NOT NULL DEFAULT 0;",
};
static_assert(sizeof kMigrations / sizeof kMigrations[0] == Store::kSchemaVersion,
              "one migration per schema version");

/// The file holds node secrets: it is created 0600 whatever the umask, and
/// an existing one readable by others is narrowed to 0600. SQLite gives its
/// -wal and -shm files the database file's mode.
void restrict_file(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    throw StoreError("cannot open the database " + path + ": " + std::strerror(errno) +
                     " (check that its directory exists and is writable)");
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  if (stat_ok && (st.st_mode & 0077) != 0) {
    if (::fchmod(fd, 0600) != 0) {
      const int err = errno;
      ::close(fd);
      char mode[8];
      std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
      throw StoreError("the database " + path + " is readable by others (mode " + mode +
                       ") and cannot be made 0600: " + std::strerror(err) +
                       " (it holds node secrets; chmod 600 it)");
    }
    if (st.st_size > 0) {
      auto l = spdlog::get("resource_manager");
      (l ? l : spdlog::default_logger())
          ->warn("the database {} was readable by others; its mode is 0600 now (it holds node "
                 "secrets)",
                 path);
    }
  }
  ::close(fd);
}

} // namespace

Store::Store(const std::string &path, const CheckpointPolicy &checkpoints)
    : path_(path), policy_(checkpoints), cache_(std::make_unique<StatementCache>()) {
  if (path != ":memory:" && path.rfind("file:", 0) != 0)
    restrict_file(path);
  // SQLite's memory statistics take a process-wide mutex around every
  // allocation (two lock pairs per statement step, a few percent of a
  // lease); nothing reads them. Only possible before SQLite initialises,
  // so the first Store of the process sets it (later calls are refused,
  // harmlessly).
  static const int memstatus_off = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  (void)memstatus_off;
  int rc =
      sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError("cannot open the database " + path + ": " + msg +
                     " (check that its directory exists and is writable)");
  }
  try {
    sqlite3_trace_v2(
        db_, SQLITE_TRACE_STMT,
        [](unsigned, void *count, void *, void *) {
          ++*static_cast<uint64_t *>(count);
          return 0;
        },
        &statements_);
    sqlite3_busy_timeout(db_, 5000);
    // WAL: readers never block the writer, and a crash mid-write loses at most
    // the transaction in flight. NORMAL is durable across process crashes.
    if (path != ":memory:") {
      Stmt wal(db_, "PRAGMA journal_mode=WAL");
      if (!wal.step() || wal.text(0) != "wal")
        throw StoreError("cannot switch " + path +
                         " to WAL mode (is it on a network file "
                         "system? put it on a local disk)");
    }
    exec("PRAGMA synchronous=NORMAL", "setting synchronous mode");
    exec("PRAGMA foreign_keys=ON", "enabling foreign keys");
    migrate();
    if (path != ":memory:" && path.rfind("file:", 0) != 0) {
      try {
        grants_ = std::make_unique<GrantJournal>(path + "-grants");
      } catch (const std::runtime_error &e) {
        throw StoreError(e.what());
      }
      replay_grants();
    }
    if (path != ":memory:") {
      // Look-ups from memory: a lease history larger than SQLite's default
      // cache (2 MiB) would read a page with pread at a grant whose random
      // id lands on a leaf not cached.
      exec("PRAGMA cache_size=-16384", "sizing the page cache");
      // Checkpoints leave the commit path (SQLite's own, every 1000 pages,
      // ran inside the commit that crossed them): the hook replaces them.
      exec(("PRAGMA journal_size_limit=" + std::to_string(policy_.keep_bytes)).c_str(),
           "limiting the log's size");
      checkpointer_ = std::make_unique<Checkpointer>(path, policy_);
      sqlite3_wal_hook(db_, &Store::committed, this);
    }
  } catch (const StoreError &e) {
    checkpointer_.reset();
    grants_.reset();
    cache_.reset();
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError(path + ": " + e.what());
  }
}

Store::~Store() {
  // Only writes waiting for their commit (accounting, lease writes) can be
  // open or queued here (every batch ends with commit_batch()): complete
  // writes, kept.
  if (batch_open_ || !pending_.empty())
    commit_open();
  // Its connection closes first, so that closing the last one below copies
  // the whole log back and removes it (SQLite does that at the last close).
  checkpointer_.reset();
  cache_.reset(); // statements go before the connection
  if (db_)
    sqlite3_close(db_);
}

namespace {
uint64_t steady_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
} // namespace

int Store::committed(void *store, sqlite3 *db, const char *, int pages) {
  static_cast<Store *>(store)->checkpointer_->after_commit(db, pages);
  return SQLITE_OK;
}

void Store::begin_batch() {
  batch_wanted_ = true;
  pass_first_seq_ = grant_seq_ + 1;
  // A transaction still open holds accounting waiting for its commit: this
  // batch adds to it.
  if (!batch_open_)
    journal_.clear();
}

bool Store::open_batch(bool deferrable) {
  // Lease writes that wait go first, so that writes stay in their order.
  settle();
  if (!batch_wanted_) {
    // A write outside a batch is committed before it returns: so is what
    // a batch left open, first.
    if (batch_open_)
      commit_open();
    return false;
  }
  if (!batch_open_) {
    // Begun at the first write, so that a pass that writes nothing costs
    // nothing.
    try {
      run_cached(db_, *cache_, "BEGIN IMMEDIATE");
    } catch (const StoreError &e) {
      throw StoreError(std::string("starting a batch of writes: ") + e.what());
    }
    batch_open_ = true;
    opened_ms_ = steady_ms();
  }
  if (!deferrable)
    must_commit_ = true;
  return true;
}

std::vector<uint64_t> Store::commit_batch() {
  batch_wanted_ = false;
  if (!batch_open_ && pending_.empty())
    return {};
  // Only writes that may wait, young and few: the transaction stays open
  // (see store.hpp). Lease writes are durable once the journal holds them.
  if (!must_commit_ && journal_.size() + pending_.size() < kDeferAtMost &&
      (!batch_open_ || steady_ms() - opened_ms_ < kDeferAtMostMs)) {
    if (!grants_ || grants_->buffered() == 0)
      return {};
    std::string why;
    if (grants_->flush(why))
      return {};
    if (auto log = spdlog::get("resource_manager"))
      log->warn("database: {}; committing instead", why);
  }
  return commit_open(pass_first_seq_);
}

void Store::join_batch() const {
  Store *self = const_cast<Store *>(this);
  self->settle();
  if (batch_wanted_)
    self->open_batch(true);
}

void Store::defer_lease_write(const Lease &l, bool fresh, bool put) {
  const uint64_t seq = ++grant_seq_;
  grants_->add(seq, put ? GrantJournal::Kind::Put : GrantJournal::Kind::Update, l);
  auto it = pending_at_.find(l.id);
  Pending *waiting = it != pending_at_.end() ? &pending_[it->second - pending_base_] : nullptr;
  // Folded into the lease's waiting write only when that one's answer left
  // with an earlier pass: a grant of this pass keeps a write of its own, so
  // that commit_open() can still withdraw it alone.
  if (waiting && waiting->seq < pass_first_seq_) {
    Pending &w = *waiting;
    w.lease = l;
    if (put) {
      // A whole lease again replaces rows the waiting write may not have
      // made: no longer fresh unless that one was.
      w.fresh = w.fresh && w.put;
      w.put = true;
    }
    return;
  }
  pending_.push_back(Pending{l, seq, fresh, put, std::chrono::steady_clock::now()});
  pending_at_[l.id] = pending_base_ + pending_.size() - 1;
}

void Store::apply_front() {
  Pending w = std::move(pending_.front());
  pending_.pop_front();
  if (auto it = pending_at_.find(w.lease.id);
      it != pending_at_.end() && it->second == pending_base_)
    pending_at_.erase(it);
  ++pending_base_;
  try {
    Transaction t(db_, *cache_, open_batch(true));
    if (w.put)
      write_lease(w.lease, w.fresh);
    else if (!write_lease_change(w.lease))
      write_lease(w.lease, false); // not stored yet: the whole lease
    t.commit();
    journal_.push_back(Redo{w.lease.id, [this, l = w.lease] { put_lease(l); }, w.seq, w.fresh});
  } catch (const StoreError &e) {
    // Answered already, its record in the journal (or its buffer, written
    // before this pass's answers): the journal keeps it, held.
    if (!grants_held_) {
      grants_held_ = true;
      if (auto log = spdlog::get("resource_manager"))
        log->error("database: writing lease {} failed ({}); the grant journal {} keeps it and "
                   "every lease write until a commit succeeds",
                   w.lease.id, e.what(), grants_->path());
    }
    append_held();
  }
}

size_t Store::apply_pending(size_t at_most, std::chrono::microseconds older_than) {
  if (pending_.empty() || applying_)
    return 0;
  const auto now = older_than.count() > 0 ? std::chrono::steady_clock::now()
                                          : std::chrono::steady_clock::time_point::max();
  const bool wanted = batch_wanted_;
  // In the batch's transaction (opened, deferred, if none is).
  batch_wanted_ = true;
  applying_ = true;
  size_t n = 0;
  while (n < at_most && !pending_.empty() &&
         (older_than.count() == 0 || now - pending_.front().at >= older_than)) {
    apply_front();
    ++n;
  }
  applying_ = false;
  batch_wanted_ = wanted;
  return n;
}

void Store::commit_deferred() {
  if ((batch_open_ || !pending_.empty()) && !batch_wanted_)
    commit_open();
}

std::optional<std::chrono::steady_clock::time_point> Store::commit_due() const {
  using std::chrono::milliseconds;
  using std::chrono::steady_clock;
  if (batch_wanted_ || (!batch_open_ && pending_.empty()))
    return std::nullopt;
  auto due = steady_clock::time_point::max();
  if (batch_open_)
    due = steady_clock::time_point(milliseconds(opened_ms_ + kDeferAtMostMs));
  // A lease write still waiting for its SQL counts from when it was made.
  if (!pending_.empty())
    due = std::min(due, pending_.front().at + milliseconds(kDeferAtMostMs));
  return due;
}

void Store::commit_if_due() {
  if (auto due = commit_due(); due && std::chrono::steady_clock::now() >= *due)
    commit_open();
}

uint64_t Store::journal_grant(GrantJournal::Kind kind, const Lease &l) {
  if (!grants_ || redoing_ || !(batch_open_ || grants_held_))
    return 0;
  grants_->add(++grant_seq_, kind, l);
  // Held, and a write outside a batch (committed already): the journal
  // still gets it, so that a replay ends with this state, not an older one.
  if (!batch_open_)
    append_held();
  return grant_seq_;
}

void Store::append_held() {
  std::string why;
  if (!grants_->flush(why))
    if (auto log = spdlog::get("resource_manager"))
      log->error("database: {}", why);
}

void Store::leave_held() {
  const uint64_t now = steady_ms();
  // Every record up to grant_seq_ must be in the file (a failed append
  // keeps them buffered), so that the stored number is true.
  if (!grants_held_ || grants_->buffered() > 0 || now < leave_retry_at_ms_)
    return;
  auto log = spdlog::get("resource_manager");
  try {
    Transaction t(db_, *cache_, false);
    const size_t applied = apply_grants(grants_->read().records);
    write_applied_seq(grant_seq_);
    t.commit();
    committed_seq_ = grant_seq_;
    grants_held_ = false;
    grants_committed();
    if (log)
      log->warn("database: {} lease write(s) of the grant journal {} were applied; the database "
                "holds every lease write again, the journal is emptied, and lease writes wait for "
                "their commit again",
                applied, grants_->path());
  } catch (const std::runtime_error &e) {
    leave_retry_at_ms_ = now + kLeaveRetryMs;
    if (log)
      log->error("database: applying the grant journal {} failed ({}); it stays kept",
                 grants_->path(), e.what());
  }
}

void Store::grants_committed() {
  if (!grants_)
    return;
  grants_->discard();
  if (grants_held_)
    return;
  std::string why;
  // A journal left full is harmless (its records are at or below the
  // stored sequence number, skipped at the next start).
  if (!grants_->truncate(why))
    if (auto log = spdlog::get("resource_manager"))
      log->warn("database: {}", why);
}

std::vector<uint64_t> Store::commit_open(uint64_t unanswered_from) {
  // The database holds every journal record up to the number stored below.
  apply_pending();
  batch_open_ = false;
  must_commit_ = false;
  auto log = spdlog::get("resource_manager");
  std::string why;
  try {
    if (grants_ && !grants_held_ && grant_seq_ > committed_seq_) {
      // In the same transaction: the database holds these records exactly
      // when it holds this number.
      write_applied_seq(grant_seq_);
    }
    run_cached(db_, *cache_, "COMMIT");
    journal_.clear();
    if (grants_held_) {
      // A commit succeeded: the disk takes writes again.
      append_held();
      leave_held();
    } else {
      committed_seq_ = grant_seq_;
      grants_committed();
    }
    return {};
  } catch (const StoreError &e) {
    why = e.what();
  }
  sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  if (log)
    log->error("database: committing {} write(s) together failed ({}); writing them one by one",
               journal_.size(), why);
  // Each write again in a transaction of its own: the registry's memory
  // already holds them, so what can be saved is saved. Outside a batch
  // now, each commits at once; their records are in the journal or its
  // buffer already.
  const bool wanted = batch_wanted_;
  batch_wanted_ = false;
  redoing_ = true;
  std::vector<uint64_t> failed;
  std::vector<uint64_t> withdrawn;
  std::vector<Redo> journal;
  journal.swap(journal_);
  for (Redo &r : journal) {
    try {
      r.write();
    } catch (const StoreError &) {
      if (r.lease)
        failed.push_back(r.lease);
      // Its client is refused (the answer has not left): a record of it
      // would bring back, at the next start, a lease nobody holds.
      if (r.grant && r.seq >= unanswered_from && grants_ && grants_->withdraw(r.seq))
        withdrawn.push_back(r.lease);
    }
  }
  // What this pass did to such a lease after its grant (an end) names a
  // lease that never was: its records go too.
  for (const Redo &r : journal)
    if (r.seq >= unanswered_from && r.seq != 0 &&
        std::find(withdrawn.begin(), withdrawn.end(), r.lease) != withdrawn.end())
      grants_->withdraw(r.seq);
  redoing_ = false;
  if (!withdrawn.empty() && log) {
    std::string refused;
    for (uint64_t id : withdrawn)
      refused += (refused.empty() ? "" : ", ") + std::to_string(id);
    log->error("database: the grant of lease(s) {} could not be written and is refused to its "
               "client",
               refused);
  }
  if (grants_ && !grants_held_) {
    bool durable = failed.empty();
    if (durable) {
      try {
        write_applied_seq(grant_seq_);
        committed_seq_ = grant_seq_;
        grants_committed();
      } catch (const StoreError &) {
        durable = false;
      }
    }
    if (!durable) {
      grants_held_ = true;
      if (log)
        log->error("database: the grant journal {} holds lease writes the database lacks; it is "
                   "kept, and every lease write is committed at once, until the journal is "
                   "applied after a commit that succeeds (else the next start applies it)",
                   grants_->path());
    }
  }
  // Records not written yet go to the journal: until the database holds
  // every write it names, it is the only complete history.
  if (grants_held_)
    append_held();
  // Once its record is in the journal's file a write is kept (the database
  // gets it when the journal is applied): only the withdrawn grants failed.
  if (grants_held_ && grants_->buffered() == 0)
    failed.erase(std::remove_if(failed.begin(), failed.end(),
                                [&](uint64_t id) {
                                  return std::find(withdrawn.begin(), withdrawn.end(), id) ==
                                         withdrawn.end();
                                }),
                 failed.end());
  batch_wanted_ = wanted;
  return failed;
}

size_t Store::apply_grants(const std::vector<GrantJournal::Record> &records) {
  size_t applied = 0;
  for (const GrantJournal::Record &r : records) {
    if (r.seq <= committed_seq_)
      continue;
    if (r.kind == GrantJournal::Kind::Put) {
      write_lease(r.lease, false);
    } else if (!write_lease_change(r.lease)) {
      auto log = spdlog::get("resource_manager");
      (log ? log : spdlog::default_logger())
          ->warn("the grant journal {}: record {} changes lease {}, which the database does not "
                 "hold (was the database restored without its journal?); skipped",
                 grants_->path(), r.seq, r.lease.id);
    }
    ++applied;
  }
  return applied;
}

void Store::replay_grants() {
  {
    Stmt q(db_, "SELECT applied FROM grant_journal WHERE id = 0");
    if (q.step())
      committed_seq_ = q.u64(0);
  }
  GrantJournal::Contents c;
  try {
    c = grants_->read();
  } catch (const std::runtime_error &e) {
    throw StoreError(e.what());
  }
  auto log = spdlog::get("resource_manager");
  if (!log)
    log = spdlog::default_logger();
  if (c.torn_bytes > 0)
    log->warn("the grant journal {} ends with {} byte(s) that are not a whole record (a write "
              "cut short); they are dropped",
              grants_->path(), c.torn_bytes);
  grant_seq_ = committed_seq_;
  if (!c.records.empty())
    grant_seq_ = std::max(grant_seq_, c.records.back().seq);
  size_t applied = 0;
  if (grant_seq_ > committed_seq_) {
    Transaction t(db_, *cache_, false);
    applied = apply_grants(c.records);
    write_applied_seq(grant_seq_);
    t.commit();
    committed_seq_ = grant_seq_;
    log->info("the grant journal {}: {} lease write(s) the database lacked were applied",
              grants_->path(), applied);
  }
  replayed_ = applied;
  std::string why;
  // Appending after a torn tail would make it damage in the middle.
  if (!grants_->truncate(why))
    throw StoreError(why);
}

void Store::exec(const char *sql, const char *what) {
  char *err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw StoreError(std::string("SQLite: ") + what + ": " + msg);
  }
}

int Store::schema_version() const {
  Stmt q(db_, "PRAGMA user_version");
  q.step();
  return static_cast<int>(q.i64(0));
}

std::string Store::journal_mode() const {
  if (path_ == ":memory:")
    return "memory";
  Stmt q(db_, "PRAGMA journal_mode");
  q.step();
  return q.text(0);
}

void Store::migrate() {
  int version = schema_version();
  if (version > kSchemaVersion)
    throw StoreError("the database has schema version " + std::to_string(version) +
                     ", newer than this resource_manager understands (" +
                     std::to_string(kSchemaVersion) + "); run a newer resource_manager");
  for (; version < kSchemaVersion; ++version) {
    Transaction t(db_, *cache_, open_batch());
    exec(kMigrations[version], "migrating the schema");
    exec(("PRAGMA user_version=" + std::to_string(version + 1)).c_str(),
         "recording the schema version");
    t.commit();
  }
}

void Store::put_node(const Node &n) {
  open_batch();
  Stmt q(db_, *cache_,
         "INSERT OR REPLACE INTO nodes (name, address, cores, memory_mib, secret, state, "
         "drained, registered_ms, last_heartbeat_ms, registration_signed_ms) "
         "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)");
  q.bind(1, n.name);
  q.bind(2, n.address);
  q.bind(3, static_cast<int64_t>(n.cores));
  q.bind(4, n.memory_mib);
  q.bind_blob(5, n.secret.data(), n.secret.size());
  q.bind(6, std::string(to_string(n.state)));
  q.bind(7, static_cast<int64_t>(n.drained));
  q.bind(8, n.registered_ms);
  q.bind(9, n.last_heartbeat_ms);
  q.bind(10, n.registration_signed_ms);
  q.run();
  if (batch_open_)
    journal_.push_back(Redo{0, [this, n] { put_node(n); }});
}

void Store::remove_node(const std::string &name) {
  open_batch();
  Stmt q(db_, "DELETE FROM nodes WHERE name = ?1");
  q.bind(1, name);
  q.run();
  if (batch_open_)
    journal_.push_back(Redo{0, [this, name] { remove_node(name); }});
}

std::vector<Node> Store::load_nodes() const {
  Stmt q(db_, "SELECT name, address, cores, memory_mib, secret, state, drained, registered_ms, "
              "last_heartbeat_ms, registration_signed_ms FROM nodes ORDER BY name");
  std::vector<Node> out;
  while (q.step()) {
    Node n;
    n.name = q.text(0);
    n.address = q.text(1);
    n.cores = static_cast<uint32_t>(q.i64(2));
    n.memory_mib = q.u64(3);
    std::string secret = q.blob(4);
    if (secret.size() != n.secret.size())
      throw StoreError(path_ + ": node " + n.name + " has a secret of " +
                       std::to_string(secret.size()) + " bytes, expected " +
                       std::to_string(n.secret.size()));
    std::memcpy(n.secret.data(), secret.data(), n.secret.size());
    if (!parse_node_state(q.text(5), n.state))
      throw StoreError(path_ + ": node " + n.name + " has an unknown state " + q.text(5));
    n.drained = q.i64(6) != 0;
    n.registered_ms = q.u64(7);
    n.last_heartbeat_ms = q.u64(8);
    n.registration_signed_ms = q.u64(9);
    out.push_back(std::move(n));
  }
  return out;
}

void Store::put_lease(const Lease &l, bool fresh) {
  if (defers_lease_writes()) {
    defer_lease_write(l, fresh, true);
    return;
  }
  Transaction t(db_, *cache_, open_batch(grants_ && !grants_held_));
  write_lease(l, fresh);
  t.commit();
  const uint64_t seq = journal_grant(GrantJournal::Kind::Put, l);
  if (batch_open_)
    journal_.push_back(Redo{l.id, [this, l] { put_lease(l); }, seq, fresh});
}

void Store::write_lease(const Lease &l, bool fresh) {
  {
    Stmt q(db_, *cache_,
           "INSERT OR REPLACE INTO leases (id, client, state, granted_ms, expiry_ms, "
           "ended_ms, secret_hash, owner_uid, job_id, tokens_until_ms) "
           "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)");
    q.bind(1, l.id);
    q.bind(2, l.client);
    q.bind(3, std::string(to_string(l.state)));
    q.bind(4, l.granted_ms);
    q.bind(5, l.expiry_ms);
    q.bind(6, l.ended_ms);
    q.bind_blob(7, l.secret_hash.data(), l.secret_hash.size());
    q.bind(8, static_cast<uint64_t>(l.owner_uid));
    q.bind(9, l.job_id);
    q.bind(10, l.tokens_until_ms);
    q.run();
  }
  if (!fresh) {
    Stmt q(db_, *cache_, "DELETE FROM lease_parts WHERE lease_id = ?1");
    q.bind(1, l.id);
    q.run();
  }
  for (size_t i = 0; i < l.parts.size(); ++i) {
    Stmt q(db_, *cache_,
           "INSERT INTO lease_parts (lease_id, idx, node, cores, memory_mib) "
           "VALUES (?1,?2,?3,?4,?5)");
    q.bind(1, l.id);
    q.bind(2, static_cast<int64_t>(i));
    q.bind(3, l.parts[i].node);
    q.bind(4, join_cores(l.parts[i].cores));
    q.bind(5, l.parts[i].memory_mib);
    q.run();
  }
}

void Store::update_lease(const Lease &l) {
  if (defers_lease_writes()) {
    defer_lease_write(l, false, false);
    return;
  }
  open_batch(grants_ && !grants_held_);
  if (!write_lease_change(l)) {
    // Not stored yet (a failed grant write made again): the whole lease.
    put_lease(l);
    return;
  }
  const uint64_t seq = journal_grant(GrantJournal::Kind::Update, l);
  if (batch_open_)
    journal_.push_back(Redo{l.id, [this, l] { put_lease(l); }, seq, false});
}

bool Store::write_lease_change(const Lease &l) {
  Stmt q(db_, *cache_,
         "UPDATE leases SET state = ?2, expiry_ms = ?3, ended_ms = ?4, tokens_until_ms = ?5 "
         "WHERE id = ?1");
  q.bind(1, l.id);
  q.bind(2, std::string(to_string(l.state)));
  q.bind(3, l.expiry_ms);
  q.bind(4, l.ended_ms);
  q.bind(5, l.tokens_until_ms);
  q.run();
  return sqlite3_changes(db_) == 1;
}

void Store::write_applied_seq(uint64_t seq) {
  Stmt q(db_, *cache_, "UPDATE grant_journal SET applied = ?1 WHERE id = 0");
  q.bind(1, seq);
  q.run();
}

bool Store::lease_exists(uint64_t id) const {
  join_batch();
  Stmt q(db_, *cache_, "SELECT 1 FROM leases WHERE id = ?1");
  q.bind(1, id);
  return q.step();
}

uint64_t Store::max_lease_id() const {
  join_batch();
  Stmt q(db_, *cache_, "SELECT MAX(id) FROM leases");
  return q.step() ? q.u64(0) : 0;
}

std::vector<Lease> Store::query_leases(const char *where, const std::string *text,
                                       std::optional<int64_t> number, size_t limit) const {
  // The leases (limited and ordered in the inner select) joined with their
  // parts: one statement however many leases match, instead of one more
  // per lease for its parts.
  std::string sql =
      "SELECT l.id, l.client, l.state, l.granted_ms, l.expiry_ms, l.ended_ms, l.secret_hash, "
      "l.owner_uid, l.job_id, l.tokens_until_ms, p.node, p.cores, p.memory_mib FROM (SELECT id, "
      "client, state, granted_ms, expiry_ms, ended_ms, secret_hash, owner_uid, job_id, "
      "tokens_until_ms FROM leases ";
  sql += where;
  sql += " ORDER BY granted_ms DESC, id LIMIT ?2) l LEFT JOIN lease_parts p ON p.lease_id = l.id "
         "ORDER BY l.granted_ms DESC, l.id, p.idx";
  // Prepared once per `where` (a handful of constants): a lease is looked
  // up on every accounting report.
  join_batch();
  Stmt q(db_, *cache_, sql.c_str());
  if (text)
    q.bind(1, *text);
  q.bind(2, static_cast<int64_t>(limit > INT64_MAX ? INT64_MAX : limit));
  if (number)
    q.bind(3, *number);
  std::vector<Lease> out;
  while (q.step()) {
    const uint64_t id = q.u64(0);
    if (out.empty() || out.back().id != id) {
      Lease l;
      l.id = id;
      l.client = q.text(1);
      if (!parse_lease_state(q.text(2), l.state))
        throw StoreError(path_ + ": lease " + std::to_string(l.id) + " has an unknown state " +
                         q.text(2));
      l.granted_ms = q.u64(3);
      l.expiry_ms = q.u64(4);
      l.ended_ms = q.u64(5);
      // Empty for a lease recorded before lease secrets (left all zero).
      std::string hash = q.blob(6);
      if (hash.size() == l.secret_hash.size())
        std::memcpy(l.secret_hash.data(), hash.data(), hash.size());
      l.owner_uid = static_cast<uint32_t>(q.u64(7));
      l.job_id = q.text(8);
      l.tokens_until_ms = q.u64(9);
      out.push_back(std::move(l));
    }
    if (!q.is_null(10))
      out.back().parts.push_back(LeasePart{q.text(10), split_cores(q.text(11)), q.u64(12)});
  }
  return out;
}

std::vector<Lease> Store::load_leases(std::optional<LeaseState> state, size_t limit) const {
  // A literal, so that the partial index of the active leases serves it.
  if (state == LeaseState::Active)
    return query_leases("WHERE state = 'active'", nullptr, std::nullopt, limit);
  if (state) {
    std::string s = to_string(*state);
    return query_leases("WHERE state = ?1", &s, std::nullopt, limit);
  }
  return query_leases("", nullptr, std::nullopt, limit);
}

std::optional<Lease> Store::load_lease(uint64_t id) const {
  auto v = query_leases("WHERE id = ?3", nullptr, static_cast<int64_t>(id), 1);
  if (v.empty())
    return std::nullopt;
  return std::move(v.front());
}

std::vector<Lease> Store::ended_unexpired_on(const std::string &node, uint64_t now_ms) const {
  return query_leases("WHERE state != 'active' AND max(expiry_ms, tokens_until_ms) > ?3 AND id IN "
                      "(SELECT lease_id FROM lease_parts WHERE node = ?1)",
                      &node, static_cast<int64_t>(now_ms), SIZE_MAX);
}

void Store::put_accounting(const AccountingRecord &r) {
  open_batch(true);
  // One statement: a stored final record stays (the upsert's WHERE), with
  // no look-up before.
  Stmt q(db_, *cache_,
         "INSERT INTO accounting (lease_id, node, client, reported_ms, "
         "allocation_us, hot_polling_us, execution_us, memory_mib, final, owner_uid, job_id) "
         "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) ON CONFLICT (lease_id, node) DO UPDATE SET "
         "client = excluded.client, reported_ms = excluded.reported_ms, allocation_us = "
         "excluded.allocation_us, hot_polling_us = excluded.hot_polling_us, execution_us = "
         "excluded.execution_us, memory_mib = excluded.memory_mib, final = excluded.final, "
         "owner_uid = excluded.owner_uid, job_id = excluded.job_id WHERE accounting.final = 0");
  q.bind(1, r.lease_id);
  q.bind(2, r.node);
  q.bind(3, r.client);
  q.bind(4, r.reported_ms);
  q.bind(5, r.allocation_us);
  q.bind(6, r.hot_polling_us);
  q.bind(7, r.execution_us);
  q.bind(8, r.memory_mib);
  q.bind(9, static_cast<int64_t>(r.final));
  q.bind(10, static_cast<uint64_t>(r.owner_uid));
  q.bind(11, r.job_id);
  q.run();
  if (batch_open_)
    journal_.push_back(Redo{0, [this, r] { put_accounting(r); }});
}

std::vector<AccountingRecord> Store::query_accounting(const char *where, const std::string *text,
                                                      int64_t id) const {
  std::string sql = "SELECT lease_id, node, client, reported_ms, allocation_us, hot_polling_us, "
                    "execution_us, memory_mib, final, owner_uid, job_id FROM accounting ";
  sql += where;
  sql += " ORDER BY reported_ms, lease_id, node";
  join_batch();
  Stmt q(db_, *cache_, sql.c_str());
  if (text)
    q.bind(1, *text);
  else
    q.bind(1, id);
  std::vector<AccountingRecord> out;
  while (q.step())
    out.push_back(AccountingRecord{q.u64(0), q.text(1), q.text(2), q.u64(3), q.u64(4), q.u64(5),
                                   q.u64(6), q.u64(7), q.i64(8) != 0,
                                   static_cast<uint32_t>(q.u64(9)), q.text(10)});
  return out;
}

std::vector<AccountingRecord> Store::accounting_for_lease(uint64_t lease_id) const {
  return query_accounting("WHERE lease_id = ?1", nullptr, static_cast<int64_t>(lease_id));
}
std::vector<AccountingRecord> Store::accounting_for_client(const std::string &client) const {
  return query_accounting("WHERE client = ?1", &client, 0);
}
std::vector<AccountingRecord> Store::all_accounting() const {
  return query_accounting("WHERE ?1 = 0", nullptr, 0);
}

void Store::put_quota(const std::string &key, const QuotaLimits &l) {
  open_batch();
  Stmt q(db_, "INSERT OR REPLACE INTO quotas (user, cores, memory_mib, leases, "
              "requests_per_minute) VALUES (?1,?2,?3,?4,?5)");
  q.bind(1, key);
  q.bind(2, l.cores);
  q.bind(3, l.memory_mib);
  q.bind(4, l.leases);
  q.bind(5, l.requests_per_minute);
  q.run();
}

void Store::remove_quota(const std::string &key) {
  open_batch();
  Stmt q(db_, "DELETE FROM quotas WHERE user = ?1");
  q.bind(1, key);
  q.run();
}

std::vector<std::pair<std::string, QuotaLimits>> Store::load_quotas() const {
  Stmt q(db_, "SELECT user, cores, memory_mib, leases, requests_per_minute FROM quotas "
              "ORDER BY user");
  std::vector<std::pair<std::string, QuotaLimits>> out;
  while (q.step())
    out.emplace_back(q.text(0),
                     QuotaLimits{q.opt_u64(1), q.opt_u64(2), q.opt_u64(3), q.opt_u64(4)});
  return out;
}

std::pair<size_t, size_t> Store::prune_history(uint64_t before_ms) {
  Transaction t(db_, *cache_, open_batch());
  {
    Stmt q(db_, "DELETE FROM accounting WHERE reported_ms < ?1 AND lease_id NOT IN "
                "(SELECT id FROM leases WHERE state = 'active')");
    q.bind(1, before_ms);
    q.run();
  }
  const size_t records = static_cast<size_t>(sqlite3_changes(db_));
  {
    // lease_parts go with their lease (ON DELETE CASCADE).
    Stmt q(db_, "DELETE FROM leases WHERE state != 'active' AND ended_ms < ?1");
    q.bind(1, before_ms);
    q.run();
  }
  const size_t leases = static_cast<size_t>(sqlite3_changes(db_));
  t.commit();
  return {leases, records};
}

// ---- enum names ------------------------------------------------------------------

const char *to_string(NodeState s) { return s == NodeState::Up ? "up" : "down"; }
bool parse_node_state(const std::string &t, NodeState &out) {
  if (t == "up")
    out = NodeState::Up;
  else if (t == "down")
    out = NodeState::Down;
  else
    return false;
  return true;
}

const char *to_string(LeaseState s) {
  switch (s) {
  case LeaseState::Active:
    return "active";
  case LeaseState::Released:
    return "released";
  case LeaseState::Expired:
    return "expired";
  case LeaseState::Revoked:
    return "revoked";
  case LeaseState::NodeDown:
    return "node_down";
  }
  return "unknown";
}
bool parse_lease_state(const std::string &t, LeaseState &out) {
  for (LeaseState s : {LeaseState::Active, LeaseState::Released, LeaseState::Expired,
                       LeaseState::Revoked, LeaseState::NodeDown})
    if (t == to_string(s)) {
      out = s;
      return true;
    }
  return false;
}

// ---- pilots (the slurm node provider) ----------------------------------------------

void Store::ensure_pilots() {
  if (pilots_ready_)
    return;
  open_batch();
  exec("CREATE TABLE IF NOT EXISTS pilots (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, "
       "state TEXT NOT NULL, secret BLOB NOT NULL, submitted_ms INTEGER NOT NULL, "
       "ended_ms INTEGER NOT NULL, reason TEXT NOT NULL, nodes TEXT NOT NULL)",
       "creating the pilots table");
  pilots_ready_ = true;
}

void Store::put_pilot(const PilotRecord &p) {
  ensure_pilots();
  open_batch();
  Stmt q(db_, "INSERT OR REPLACE INTO pilots (id, job_id, state, secret, submitted_ms, ended_ms, "
              "reason, nodes) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)");
  q.bind(1, p.id);
  q.bind(2, p.job_id);
  q.bind(3, p.state);
  q.bind_blob(4, p.secret.data(), p.secret.size());
  q.bind(5, p.submitted_ms);
  q.bind(6, p.ended_ms);
  q.bind(7, p.reason);
  q.bind(8, p.nodes);
  q.run();
}

std::vector<PilotRecord> Store::load_pilots(size_t ended_limit) {
  ensure_pilots();
  Stmt q(db_, "SELECT id, job_id, state, secret, submitted_ms, ended_ms, reason, nodes FROM "
              "pilots ORDER BY id DESC");
  std::vector<PilotRecord> out;
  size_t ended = 0;
  while (q.step()) {
    PilotRecord p;
    p.id = q.u64(0);
    p.job_id = q.u64(1);
    p.state = q.text(2);
    if (p.state == "ended" && ended++ >= ended_limit)
      continue;
    std::string secret = q.blob(3);
    if (secret.size() != p.secret.size())
      throw StoreError(path_ + ": pilot " + std::to_string(p.id) + " has a secret of " +
                       std::to_string(secret.size()) + " bytes, expected " +
                       std::to_string(p.secret.size()));
    std::memcpy(p.secret.data(), secret.data(), p.secret.size());
    p.submitted_ms = q.u64(4);
    p.ended_ms = q.u64(5);
    p.reason = q.text(6);
    p.nodes = q.text(7);
    out.push_back(std::move(p));
  }
  return out;
}

} // namespace rfaas::rm
