// The resource manager's durable state: nodes, leases and accounting in one
// SQLite file (WAL mode), so that a restart loses nothing and the leases that
// were live stay valid.
//
// Every write is one transaction; the registry writes before it changes its
// memory, so a failed write (disk full, read-only file) leaves both as they
// were. The loop groups the writes of one pass over the fabric in a batch:
// one commit for all its grants, each write a savepoint inside it, and the
// answers leave only once the batch is committed, or, for a batch of lease
// writes, once the grant journal holds them (grant_journal.hpp): their SQL
// then runs after the answers (apply_pending), and the transaction stays
// open up to kDeferAtMostMs and takes the next passes' writes too. Only the
// loop thread uses a Store.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "resource_manager/checkpointer.hpp"
#include "resource_manager/grant_journal.hpp"
#include "resource_manager/lease.hpp"
#include "resource_manager/node.hpp"
#include "resource_manager/quota.hpp"

struct sqlite3;

namespace rfaas::rm {

/// A pilot job of the slurm node provider (slurm_provider.hpp), as stored
/// so that a restarted resource manager finds its jobs again.
struct PilotRecord {
  /// The resource manager's own number for it (its work directory's name).
  uint64_t id = 0;
  /// SLURM's job id; 0 until sbatch answered.
  uint64_t job_id = 0;
  /// "submitting", "pending", "running", "cancelling" or "ended".
  std::string state;
  /// The per-job secret its executor managers register with.
  NodeSecret secret{};
  uint64_t submitted_ms = 0;
  uint64_t ended_ms = 0;
  /// Why it ended (empty while it lives).
  std::string reason;
  /// Its nodes' names at the resource manager, comma-separated.
  std::string nodes;
};

class StatementCache;

/// A database error, with SQLite's own message and what was being done.
class StoreError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Store {
public:
  /// The schema version this code writes (PRAGMA user_version). Opening a
  /// file with an older version migrates it; a newer one is refused.
  static constexpr int kSchemaVersion = 7;

  /// Opens (creating if needed) the database at `path`; ":memory:" works for
  /// tests. A file's log is checkpointed by a thread of its own (see
  /// checkpointer.hpp), as `checkpoints` says. A file has a grant journal
  /// beside it (grants_path()): the records it holds that the database
  /// lacks are applied first, in one transaction, and the journal emptied;
  /// a torn last record is dropped with a warning. Throws StoreError naming
  /// the file on failure, and when the journal is damaged before its end.
  explicit Store(const std::string &path, const CheckpointPolicy &checkpoints = {});
  ~Store();
  Store(const Store &) = delete;
  Store &operator=(const Store &) = delete;

  int schema_version() const;
  /// SQL statements run on this connection so far (SQLite's own count of
  /// statements started, transactions included): for tests that check how
  /// many queries an operation costs.
  uint64_t statements_run() const { return statements_; }
  /// "wal" once opened on a file (":memory:" reports "memory").
  std::string journal_mode() const;
  const std::string &path() const { return path_; }
  /// The grant journal's file (`<path>-grants`); empty for ":memory:" and
  /// "file:" URIs, which have none (their lease writes commit as others).
  std::string grants_path() const { return grants_ ? grants_->path() : std::string(); }
  /// Records the grant journal replayed when this Store opened.
  size_t grants_replayed() const { return replayed_; }
  /// Checkpoints the thread ran so far (0 for ":memory:").
  uint64_t checkpoints() const { return checkpointer_ ? checkpointer_->checkpoints() : 0; }

  void put_node(const Node &node);
  void remove_node(const std::string &name);
  std::vector<Node> load_nodes() const;

  /// Inserts or replaces a lease and its parts. Inside a batch, with a
  /// grant journal, it waits: its record goes to the journal's buffer, which
  /// commit_batch() writes with one write(2) before the pass's answers
  /// leave, and its SQL runs later (apply_pending()): no statement is on
  /// the lease's path. `fresh`: a grant, whose id was never
  /// stored (no old parts to delete first) and whose client has not been
  /// answered yet (commit_batch() refuses it when its write fails again).
  /// Not fresh: a lease written again (a renewal of a lease the database
  /// lacks while the journal is held, a write made again).
  void put_lease(const Lease &lease, bool fresh = false);
  /// Stores a change of an already stored lease's state, expiry and end
  /// (renewal, end): one row, its parts untouched (they never change).
  /// Waits as put_lease does; a change of a lease whose write still waits
  /// from an earlier pass replaces that write (a lease granted and released
  /// between two applications costs one row write).
  void update_lease(const Lease &lease);
  /// Runs, oldest first, at most `at_most` of the lease writes waiting for
  /// their SQL, only those that have waited `older_than` or more; returns
  /// how many ran. Each runs in the open (deferred) transaction, which is
  /// committed as commit_batch() says. The loop calls it between requests
  /// and before it sleeps; every other call of the Store (a read, another
  /// write, a commit) runs them all first, so nothing sees the database
  /// without them. A write that fails here was answered already and its
  /// record is in the journal: the journal is then held (see
  /// commit_batch()). Never throws.
  size_t apply_pending(size_t at_most = SIZE_MAX,
                       std::chrono::microseconds older_than = std::chrono::microseconds(0));
  /// Lease writes waiting for their SQL.
  size_t pending_writes() const { return pending_.size(); }
  /// Whether lease `id` was ever stored (one primary-key look-up).
  bool lease_exists(uint64_t id) const;
  /// The highest lease id stored (0 when none): ids given above it cannot
  /// name a stored lease, so a grant needs no look-up.
  uint64_t max_lease_id() const;
  /// Leases in `state` (all if nullopt), newest first, at most `limit`.
  /// Each of these lease queries is one SQL statement, parts included.
  std::vector<Lease> load_leases(std::optional<LeaseState> state = std::nullopt,
                                 size_t limit = SIZE_MAX) const;
  std::optional<Lease> load_lease(uint64_t id) const;
  /// Leases that ended but whose expiry or latest token expiry
  /// (Lease::tokens_until_ms) is after `now_ms`, with a part on `node`:
  /// their tokens would still verify on a node that forgot the end.
  std::vector<Lease> ended_unexpired_on(const std::string &node, uint64_t now_ms) const;

  /// Inserts or replaces the record of (lease_id, node), unless the stored
  /// one is final: a final report is the last word for its lease on that
  /// node. Inside a batch it may wait for its commit (commit_batch()).
  void put_accounting(const AccountingRecord &rec);
  std::vector<AccountingRecord> accounting_for_lease(uint64_t lease_id) const;
  std::vector<AccountingRecord> accounting_for_client(const std::string &client) const;
  std::vector<AccountingRecord> all_accounting() const;

  /// Quota limits set through the REST API, per user key (QuotaUser::key();
  /// "" is the default). Absent fields are stored as NULL.
  void put_quota(const std::string &key, const QuotaLimits &limits);
  void remove_quota(const std::string &key);
  std::vector<std::pair<std::string, QuotaLimits>> load_quotas() const;

  /// Groups the writes that follow, until commit_batch(), in one
  /// transaction (one commit instead of one per write); each write is a
  /// savepoint inside it, so a write that fails is undone alone and
  /// reported as before. Throws StoreError when the transaction cannot start.
  void begin_batch();
  /// Ends the batch: its writes are durable when it returns. When the
  /// commit fails, the batch is rolled back and each of its writes made
  /// again in a transaction of its own; returns the ids of the leases whose
  /// write failed again and is kept nowhere (empty: all is durable), whose
  /// answers of this batch the caller must turn into refusals. A grant of
  /// this batch whose write fails again is among them and leaves no record
  /// in the grant journal (a restart does not bring back a lease its client
  /// was refused); every other lease write keeps its record, and is not
  /// among them once that record is in the journal's file. The journal is
  /// then held (kept, and every lease write committed at once) until a
  /// later commit succeeds and the journal is applied to the database.
  /// Never throws.
  ///
  /// The transaction stays open instead (the next batch adds to it) while
  /// it holds only writes that may wait: accounting records (they answer
  /// nothing; a crash of the process loses them) and, with a grant
  /// journal, lease writes, whose records are then written to the journal
  /// with one write(2) before this returns (a crash keeps them: the next
  /// start replays them). It is committed with the first batch that holds
  /// any other write (a node, a quota, a pilot), by commit_deferred() or
  /// commit_if_due(), by any write outside a batch, when the Store closes,
  /// or once it is kDeferAtMostMs old or holds kDeferAtMost writes; also
  /// when the journal cannot be written (logged). Until then, other
  /// connections (the checkpointer, a `sqlite3 .backup`) see the database
  /// as it was at the last commit; this one sees every write.
  std::vector<uint64_t> commit_batch();
  /// Commits what waits for its commit (between batches; a failed commit
  /// writes each write again on its own). Never throws.
  void commit_deferred();
  /// When what waits must be committed (kDeferAtMostMs after its first
  /// write); nullopt when nothing waits. The loop sleeps no longer.
  std::optional<std::chrono::steady_clock::time_point> commit_due() const;
  /// commit_deferred() once commit_due() has passed. Never throws.
  void commit_if_due();
  /// Longest a write waits for its commit while the loop runs, and most
  /// writes that wait.
  static constexpr uint64_t kDeferAtMostMs = 50;
  static constexpr size_t kDeferAtMost = 256;
  bool in_batch() const { return batch_wanted_; }

  /// Deletes leases that ended before `before_ms` (with their parts) and
  /// accounting records reported before it whose lease is no longer active.
  /// Returns how many leases and records went.
  std::pair<size_t, size_t> prune_history(uint64_t before_ms);

  /// The slurm node provider's pilots (a table of their own, created on the
  /// first use: a resource manager with static nodes never has one).
  void put_pilot(const PilotRecord &pilot);
  /// Pilots, newest first: all that have not ended, and at most
  /// `ended_limit` of the ended ones.
  std::vector<PilotRecord> load_pilots(size_t ended_limit = SIZE_MAX);

private:
  void exec(const char *sql, const char *what);
  void migrate();
  /// Leases matching `where` with their parts, in one statement; `where`
  /// may use ?1 (`text`, when given) and ?3 (`number`, when given).
  std::vector<Lease> query_leases(const char *where, const std::string *text,
                                  std::optional<int64_t> number, size_t limit) const;
  std::vector<AccountingRecord> query_accounting(const char *where, const std::string *text,
                                                 int64_t id) const;

  void ensure_pilots();
  /// The rows of put_lease (inside the caller's transaction).
  void write_lease(const Lease &lease, bool fresh);
  /// The row change of update_lease (state, expiry, end; inside the
  /// caller's transaction). False when the lease is not stored.
  bool write_lease_change(const Lease &lease);
  /// Stores the grant journal's last sequence number the database holds
  /// (inside the transaction that makes it true).
  void write_applied_seq(uint64_t seq);
  /// Adds a lease write's record to the grant journal's buffer (inside a
  /// batch, or on every write once the journal is held) and returns its
  /// sequence number; 0 when it adds none.
  uint64_t journal_grant(GrantJournal::Kind kind, const Lease &lease);
  /// Applies, in order, the records above committed_seq_ (inside the
  /// caller's transaction); returns how many.
  size_t apply_grants(const std::vector<GrantJournal::Record> &records);
  /// Applies the journal's records the database lacks (at open).
  void replay_grants();
  /// While held, after a commit that succeeded (the disk takes writes
  /// again): applies the journal's records above committed_seq_ in a
  /// transaction of its own with the last sequence number, empties the
  /// journal and ends the held state. Never throws; after a failure, not
  /// tried again for kLeaveRetryMs (a large journal is not applied again
  /// at every pass).
  void leave_held();
  /// Empties the journal after a commit that made everything in it durable.
  void grants_committed();
  /// While held: writes the buffered records (their writes are in the
  /// database, or kept for the next start). Logs a failure; the records
  /// stay buffered for the next try.
  void append_held();

  /// Whether a lease write now waits (apply_pending()) instead of running:
  /// inside a batch, with a journal that is not held.
  bool defers_lease_writes() const {
    return grants_ && !grants_held_ && batch_wanted_ && !redoing_;
  }
  /// Journals a lease write and queues it (or folds it into the waiting
  /// write of the same lease).
  void defer_lease_write(const Lease &lease, bool fresh, bool put);
  /// Runs the oldest waiting lease write (inside a batch).
  void apply_front();
  /// Runs every waiting lease write, unless one is running.
  void settle() {
    if (!pending_.empty() && !applying_)
      apply_pending();
  }

  /// SQLite's WAL hook: after each commit, with the log's size in pages.
  static int committed(void *store, sqlite3 *db, const char *schema, int pages);

  std::string path_;
  sqlite3 *db_ = nullptr;
  CheckpointPolicy policy_;
  std::unique_ptr<Checkpointer> checkpointer_;
  bool pilots_ready_ = false;
  uint64_t statements_ = 0;

  std::unique_ptr<StatementCache> cache_;
  /// Opens the batch's transaction at its first write; true inside one.
  /// Outside a batch, first commits what a batch left open (accounting
  /// waiting for its commit). `deferrable`: the write may wait for its
  /// commit (accounting); any other write in a batch makes it commit.
  bool open_batch(bool deferrable = false);
  /// Inside a batch, a look-up joins the batch's transaction (opening it
  /// without making it need a commit): SQLite takes its file locks (fcntl
  /// calls) once per transaction, so a pass's reads and writes share one
  /// set instead of a read transaction per look-up.
  void join_batch() const;
  /// Commits the open transaction; on failure rolls back and makes each
  /// journaled write again on its own. Returns the leases that failed again.
  /// Records numbered `unanswered_from` and above belong to writes whose
  /// answers have not left (commit_batch's pass): a grant among them that
  /// fails again is refused by the caller, so its record is withdrawn.
  std::vector<uint64_t> commit_open(uint64_t unanswered_from = UINT64_MAX);
  bool batch_wanted_ = false;
  bool batch_open_ = false;
  /// The open transaction holds a write that some answer waits for.
  bool must_commit_ = false;
  /// When the open transaction's first write was made (steady clock, ms).
  uint64_t opened_ms_ = 0;
  /// A write of the open transaction, made again on its own when the
  /// commit fails.
  struct Redo {
    /// Its lease, or 0.
    uint64_t lease = 0;
    std::function<void()> write;
    /// Its grant journal record's sequence number, or 0.
    uint64_t seq = 0;
    /// A grant (put_lease's `fresh`): if it fails again before its answer
    /// left, its client is refused and the lease must not come back from
    /// the journal. A renewal written whole (its lease not in the database
    /// while the journal is held) is not one.
    bool grant = false;
  };
  std::vector<Redo> journal_;
  /// The first record of the current batch (commit_batch's pass).
  uint64_t pass_first_seq_ = UINT64_MAX;
  /// Inside commit_open's writes made again: they add no record (theirs
  /// are buffered already).
  bool redoing_ = false;

  /// The grant journal (null for ":memory:").
  std::unique_ptr<GrantJournal> grants_;
  /// The last sequence number given to a record, and the last one the
  /// database holds (stored with each commit).
  uint64_t grant_seq_ = 0;
  uint64_t committed_seq_ = 0;
  /// A commit failed and a write made again failed too: the journal holds
  /// records the database lacks. From then on it is kept (never emptied)
  /// and every lease write goes to it, so that replaying it at the next
  /// start redoes every lease write since, in order; nothing waits for its
  /// commit any more. Ends once a commit succeeds (leave_held()).
  bool grants_held_ = false;
  /// steady_ms() before which leave_held() is not tried again.
  uint64_t leave_retry_at_ms_ = 0;
  static constexpr uint64_t kLeaveRetryMs = 1000;
  size_t replayed_ = 0;

  /// A lease write waiting for its SQL: its record is in the journal (or
  /// its buffer, until the pass ends).
  struct Pending {
    Lease lease;
    /// Its record's sequence number (of the first write folded into it).
    uint64_t seq = 0;
    /// put_lease's `fresh`.
    bool fresh = false;
    /// The whole lease (put_lease), else its change (update_lease).
    bool put = false;
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Pending> pending_;
  /// The position of pending_.front() counted since the Store opened, and
  /// each lease's waiting write by that count.
  uint64_t pending_base_ = 0;
  std::unordered_map<uint64_t, uint64_t> pending_at_;
  /// Inside apply_pending().
  bool applying_ = false;
};

} // namespace rfaas::rm
