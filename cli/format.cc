#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "common/escape.h"

namespace moe::cli {

std::string FormatNumber(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& raw) {
  // Cells quote what workers and submitters wrote: control characters are shown, never obeyed.
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : raw) {
    rows.emplace_back();
    for (const auto& cell : r) rows.back().push_back(EscapeControl(cell));
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  std::ostringstream os;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      os << cells[i];
      if (i + 1 < cells.size()) os << std::string(width[i] - cells[i].size() + 3, ' ');
    }
    os << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
  return os.str();
}

std::string Duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "-";
  const long t = static_cast<long>(std::lround(s));
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lds", t);
  return buf;
}

std::string StateName(moe::v1::JobState s) { return moe::v1::JobState_Name(s); }
std::string WorkerStateName(moe::v1::WorkerState s) { return moe::v1::WorkerState_Name(s); }

std::string ProgressLine(const moe::v1::StepMetrics& m, int width) {
  const double frac =
      m.total_steps() > 0
          ? std::min(1.0, static_cast<double>(m.step()) / static_cast<double>(m.total_steps()))
          : 0;
  const int filled = static_cast<int>(frac * width);
  std::string bar = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(width - filled), '.') + "]";
  char buf[512];
  const double tps = m.tokens_per_second();
  char tok[32];
  if (tps >= 1e6)
    std::snprintf(tok, sizeof(tok), "%.2fM", tps / 1e6);
  else if (tps >= 1e3)
    std::snprintf(tok, sizeof(tok), "%.1fk", tps / 1e3);
  else
    std::snprintf(tok, sizeof(tok), "%.0f", tps);
  std::snprintf(buf, sizeof(buf),
                "step %lld/%lld %s %3.0f%% | loss %.4f | %.4f TFLOP/s/device | MFU %.1f%% | %s "
                "tok/s | ETA %s",
                static_cast<long long>(m.step()), static_cast<long long>(m.total_steps()),
                bar.c_str(), frac * 100, m.loss(), m.tflops_per_device(), m.mfu() * 100, tok,
                Duration(m.eta_seconds()).c_str());
  std::string out = buf;
  if (m.has_eval_loss()) {
    std::snprintf(buf, sizeof(buf), " | eval loss %.4f (ppl %.1f)", m.eval_loss(), m.eval_ppl());
    out += buf;
  }
  if (m.stragglers_size() > 0) {
    out += " | straggler rank";
    for (int r : m.stragglers()) out += " " + std::to_string(r);
  }
  return out;
}

namespace {

// The racks an attempt holds, with the ranks in each: "r0:4 r1:4".
std::string PlacementRacks(const moe::v1::Job& j) {
  std::map<std::string, int> racks;
  for (const auto& p : j.placement()) racks[p.rack()]++;
  std::string out;
  for (const auto& [rack, n] : racks)
    out += (out.empty() ? "" : " ") + rack + ":" + std::to_string(n);
  return out.empty() ? "-" : out;
}

// "team=research,tier=low" (sorted), or "-".
std::string Labels(const moe::v1::Job& j) {
  const auto& labels = j.spec().metadata().labels();
  const std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  std::string out;
  for (const auto& [k, v] : sorted) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out.empty() ? "-" : out;
}

// The seconds the job waited for workers: queued (submitted, requeued), preempted, and a restart's
// back-off.
double Waited(const moe::v1::Goodput& g) {
  return g.queued_seconds() + g.preempted_seconds() + g.backoff_seconds();
}

// Slurm's ELAPSED: the time the job has run (its wall time less every wait: queued, preempted,
// backing off), "-" before its first placement; what a chargeback bills.
std::string Elapsed(const moe::v1::Job& j) {
  if (j.attempt() == 0) return "-";
  return Duration(std::max(0.0, j.goodput().wall_seconds() - Waited(j.goodput())));
}

}  // namespace

TableRows JobRows(const std::vector<moe::v1::Job>& jobs, double now, bool wide) {
  TableRows t;
  t.header = {"ID",   "STATE", "USER",        "QUEUE",    "PRIORITY", "RANKS",
              "STEP", "LOSS",  "TFLOP/S/DEV", "RESTARTS", "ELAPSED",  "AGE"};
  if (wide) {
    t.header.insert(t.header.end(),
                    {"WAITED", "GOODPUT", "ATTEMPT", "CHECKPOINT", "RACKS", "LABELS", "REASON"});
  }
  for (const auto& j : jobs) {
    const auto& par = j.spec().spec().parallelism();
    const auto& m = j.last_metrics();
    std::vector<std::string> row = {
        j.id(),
        StateName(j.state()),
        j.owner().empty() ? "-" : j.owner(),
        j.spec().metadata().queue().empty() ? "-" : j.spec().metadata().queue(),
        std::to_string(j.spec().metadata().priority()),
        std::to_string(par.world_size()) + " (EP " + std::to_string(par.expert_parallel()) + ")",
        m.step() > 0 ? std::to_string(m.step()) + "/" + std::to_string(m.total_steps()) : "-",
        m.step() > 0 ? FormatNumber(m.loss()) : "-",
        m.step() > 0 ? FormatNumber(m.tflops_per_device()) : "-",
        std::to_string(j.restarts()),
        Elapsed(j),
        Duration(now - j.created_at())};
    if (wide) {
      const std::string reason = !j.waiting_reason().empty() ? j.waiting_reason() : j.message();
      const double wall = j.goodput().wall_seconds();
      row.insert(
          row.end(),
          {wall > 0 ? Duration(Waited(j.goodput())) : "-",
           wall > 0 ? FormatNumber(j.goodput().ratio(), 2) : "-", std::to_string(j.attempt()),
           j.checkpoint_step() > 0 ? "step " + std::to_string(j.checkpoint_step()) : "-",
           PlacementRacks(j), Labels(j), reason.empty() ? "-" : reason});
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

TableRows WorkerRows(const std::vector<moe::v1::Worker>& workers, double now, bool wide) {
  TableRows t;
  t.header = {"NAME", "STATE", "RACK", "NODE", "DEVICE", "RUNS", "HEARTBEAT"};
  if (wide) t.header.insert(t.header.end(), {"ADDRESS", "MEMORY", "REGISTERED"});
  for (const auto& w : workers) {
    // A drained worker still running its rank shows as DRAINING (moe_workers{state="draining"}).
    const bool draining = w.drained() && w.state() == moe::v1::BUSY;
    std::vector<std::string> row = {
        w.name(),
        draining ? "DRAINING" : WorkerStateName(w.state()),
        w.rack(),
        w.node(),
        w.device(),
        w.job_id().empty() ? "-" : w.job_id() + " r" + std::to_string(w.rank()),
        w.last_heartbeat() > 0 ? Duration(now - w.last_heartbeat()) + " ago" : "-"};
    if (wide) {
      row.insert(row.end(),
                 {w.address().empty() ? "-" : w.address(),
                  w.memory_bytes() > 0
                      ? FormatNumber(static_cast<double>(w.memory_bytes()) / 1e9, 1) + " GB"
                      : "-",
                  w.registered_at() > 0 ? Duration(now - w.registered_at()) + " ago" : "-"});
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::string JobsTable(const std::vector<moe::v1::Job>& jobs, double now, bool wide) {
  const TableRows t = JobRows(jobs, now, wide);
  return Table(t.header, t.rows);
}

std::string WorkersTable(const std::vector<moe::v1::Worker>& workers, double now, bool wide) {
  const TableRows t = WorkerRows(workers, now, wide);
  return Table(t.header, t.rows);
}

// One row per queue and device type: QUOTA is the nominal quota ("-": unlimited), BORROWED what the
// queue uses past it from its cohort, PENDING and ADMITTED its jobs.
std::string QueuesTable(const std::vector<moe::v1::QueueStatus>& queues) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& q : queues) {
    const std::string jobs[2] = {std::to_string(q.pending_jobs()),
                                 std::to_string(q.admitted_jobs())};
    // No resource row: a queue with no quota (it can only borrow) and nothing running.
    if (q.resources().empty())
      rows.push_back({q.name(), q.cohort().empty() ? "-" : q.cohort(), "-", "0", "0", "0", "-",
                      jobs[0], jobs[1]});
    for (const auto& r : q.resources()) {
      rows.push_back({q.name(), q.cohort().empty() ? "-" : q.cohort(), r.device(),
                      r.nominal() < 0 ? "-" : std::to_string(r.nominal()), std::to_string(r.used()),
                      std::to_string(r.borrowed()),
                      r.borrowing_limit() < 0 ? "-" : std::to_string(r.borrowing_limit()), jobs[0],
                      jobs[1]});
    }
  }
  return Table({"NAME", "COHORT", "DEVICE", "QUOTA", "USED", "BORROWED", "BORROW-LIMIT", "PENDING",
                "ADMITTED"},
               rows);
}

std::string RacksTable(const std::vector<moe::v1::RackStatus>& racks) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : racks) {
    rows.push_back({r.name(), std::to_string(r.workers()), std::to_string(r.idle()),
                    std::to_string(r.busy()), std::to_string(r.draining()),
                    std::to_string(r.lost()), std::to_string(r.spares()),
                    std::to_string(r.spares_in_use())});
  }
  return Table({"RACK", "WORKERS", "IDLE", "BUSY", "DRAINING", "LOST", "SPARES", "SPARES-IN-USE"},
               rows);
}

std::string DescribeWorker(const moe::v1::Worker& w, double now) {
  std::ostringstream os;
  char memory[32] = "-";
  if (w.memory_bytes() > 0)
    std::snprintf(memory, sizeof(memory), "%.1f GB", static_cast<double>(w.memory_bytes()) / 1e9);
  os << "Worker:       " << w.name() << "\n"
     << "State:        " << WorkerStateName(w.state())
     << (w.drained() && w.state() != moe::v1::DRAINED ? " (drained)" : "") << "\n"
     << "Rack:         " << w.rack() << "\n"
     << "Node:         " << w.node() << "\n"
     << "Device:       " << w.device() << "\n"
     << "Address:      " << (w.address().empty() ? "-" : w.address()) << "\n"
     << "Memory:       " << memory << " per rank\n"
     << "Runs:         "
     << (w.job_id().empty() ? "-" : w.job_id() + " rank " + std::to_string(w.rank())) << "\n"
     << "Registered:   "
     << (w.registered_at() > 0 ? Duration(now - w.registered_at()) + " ago" : "-") << "\n"
     << "Heartbeat:    "
     << (w.last_heartbeat() > 0 ? Duration(now - w.last_heartbeat()) + " ago" : "-") << "\n";
  return os.str();
}

std::string EventsTable(const moe::v1::Job& j, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : j.events()) {
    rows.push_back({Duration(now - e.time()) + " ago", e.type(), StateName(e.state()),
                    EscapeControl(e.message())});
  }
  return Table({"AGE", "TYPE", "STATE", "MESSAGE"}, rows);
}

namespace {

// "W=8 (PP 2 x DP 4; EP 2 within DP, expert DP 2; VPP 2)".
std::string LayoutString(const moe::v1::ParallelismSpec& par) {
  const int64_t w = par.world_size(),
                pp =
                    std::max<int64_t>(1, par.has_pipeline_parallel() ? par.pipeline_parallel() : 1);
  const int64_t ep = std::max<int64_t>(1, par.expert_parallel()), dp = std::max<int64_t>(1, w / pp);
  std::string out = "W=" + std::to_string(w) + " (PP " + std::to_string(pp) + " x DP " +
                    std::to_string(dp) + "; EP " + std::to_string(ep) + " within DP, expert DP " +
                    std::to_string(std::max<int64_t>(1, dp / ep));
  if (par.virtual_pipeline() > 1) out += "; VPP " + std::to_string(par.virtual_pipeline());
  return out + ")";
}

// The measured step against the planner's for this attempt (moe-controller --plan-cluster).
std::string PlanLine(const moe::v1::Job& j) {
  const double planned = j.planned_step_seconds(), measured = j.last_metrics().step_seconds();
  if (planned <= 0 || measured <= 0) return "";
  return "  planned step " + FormatNumber(planned, 3) + " s (" + j.plan_basis() +
         "): measured / planned " + FormatNumber(measured / planned, 2) + "\n";
}

// Where the job's wall time went (controller/goodput.h), as of the call: the productive share, then
// each cause of lost time with its seconds and share; nothing before any time was counted.
std::string GoodputSection(const moe::v1::Goodput& g) {
  if (g.wall_seconds() <= 0) return "";
  const double wall = g.wall_seconds();
  auto share = [wall](double s) { return FormatNumber(100 * s / wall, 1) + "%"; };
  std::vector<std::vector<std::string>> rows = {
      {"  productive", Duration(g.productive_seconds()), share(g.productive_seconds())}};
  const std::pair<const char*, double> causes[] = {{"queued", g.queued_seconds()},
                                                   {"starting", g.starting_seconds()},
                                                   {"redone", g.redone_seconds()},
                                                   {"checkpoint stall", g.checkpoint_seconds()},
                                                   {"restart back-off", g.backoff_seconds()},
                                                   {"preempted", g.preempted_seconds()},
                                                   {"evaluation (wanted)", g.evaluation_seconds()}};
  for (const auto& [name, seconds] : causes) {
    if (seconds > 0) rows.push_back({std::string("  ") + name, Duration(seconds), share(seconds)});
  }
  return "Goodput:      " + FormatNumber(g.ratio(), 3) + " (productive / wall over " +
         Duration(wall) + " since the submission)\n" +
         Table({"  WHERE THE TIME WENT", "TIME", "SHARE"}, rows);
}

// The checkpoint interval the controller advises from the job's own measurements (unset without
// moe-controller --mtbf-hours or before a measured step).
std::string CheckpointAdviceSection(const moe::v1::Job& j) {
  if (!j.has_checkpoint_advice()) return "";
  const moe::v1::CheckpointAdvice& a = j.checkpoint_advice();
  auto secs = [](double x) { return x < 60 ? FormatNumber(x, 2) + " s" : Duration(x); };
  std::string now = a.current_interval_steps() > 0
                        ? "; now every " + std::to_string(a.current_interval_steps()) +
                              " steps: " + FormatNumber(a.current_goodput(), 3)
                        : "; now only at the end";
  return "Checkpoints:  every " + std::to_string(a.interval_steps()) +
         " steps advised (Young-Daly " + Duration(a.young_daly_seconds()) +
         " of work), predicted goodput " + FormatNumber(a.goodput(), 3) + now +
         "\n              from a step of " + secs(a.step_seconds()) + ", a save stall of " +
         secs(a.stall_seconds()) + ", a start-up of " + secs(a.restart_seconds()) + ", MTBF " +
         FormatNumber(a.mtbf_hours_per_device(), 0) + " h per device x " +
         std::to_string(a.devices()) + " devices\n";
}

}  // namespace

std::string Describe(const moe::v1::Job& j, double now) {
  std::ostringstream os;
  const auto& spec = j.spec().spec();
  const auto& model = spec.model();
  os << "Job:          " << j.id() << "\n"
     << "Name:         " << j.spec().metadata().name() << "\n"
     << "State:        " << StateName(j.state())
     << (j.message().empty() ? "" : " (" + EscapeControl(j.message()) + ")") << "\n"
     << (j.waiting_reason().empty() ? ""
                                    : "Waiting:      " + EscapeControl(j.waiting_reason()) + "\n")
     << "Priority:     " << j.spec().metadata().priority() << "\n"
     << "Labels:       " << Labels(j) << "\n"
     << "Created:      " << Duration(now - j.created_at()) << " ago\n"
     << "Attempt:      " << j.attempt() << " (restarts " << j.restarts() << " of "
     << spec.max_restarts() << ")\n"
     << "Model:        " << (model.preset().empty() ? "custom" : model.preset()) << ": hidden "
     << model.hidden_size() << ", " << model.num_layers() << " layers (" << model.first_k_dense()
     << " dense), " << model.moe().num_experts() << " experts top-" << model.moe().top_k() << ", "
     << model.moe().num_shared_experts() << " shared, vocab " << model.vocab_size() << "\n"
     << "Parallelism:  " << LayoutString(spec.parallelism()) << ", EP groups within one "
     << spec.placement().expert_group_within() << "\n"
     << "Data:         " << (spec.data().source() == "synthetic" ? "synthetic" : spec.data().path())
     << ", " << spec.data().global_batch_size() << " x " << spec.data().seq_length()
     << " tokens per step\n"
     << "Training:     " << spec.training().steps() << " steps, lr " << spec.optimizer().lr()
     << ", checkpoints in " << (spec.checkpoint().dir().empty() ? "-" : spec.checkpoint().dir())
     << " every " << spec.checkpoint().interval_steps() << " steps"
     << (j.checkpoint_step() > 0 ? ", newest reported: step " + std::to_string(j.checkpoint_step())
                                 : "")
     << "\n";
  if (j.placement_size() > 0) {
    os << "Placement:\n";
    std::map<std::string, std::map<std::string, std::vector<std::string>>> tree;
    for (const auto& p : j.placement()) {
      tree[p.rack()][p.node()].push_back("rank " + std::to_string(p.rank()) + " (pp " +
                                         std::to_string(p.pp()) + ", dp " + std::to_string(p.dp()) +
                                         ", ep " + std::to_string(p.ep()) + "; " + p.worker() +
                                         ", " + p.device() + ")");
    }
    for (const auto& [rack, nodes] : tree) {
      os << "  rack " << rack << "\n";
      for (const auto& [node, ranks] : nodes) {
        os << "    node " << node << "\n";
        for (const auto& r : ranks) os << "      " << r << "\n";
      }
    }
  }
  if (j.last_eval().step() > 0) {
    const auto& e = j.last_eval();
    os << "Validation:   loss " << FormatNumber(e.loss()) << " (ppl " << FormatNumber(e.ppl(), 1)
       << ")" << (e.mtp_loss() > 0 ? ", mtp loss " + FormatNumber(e.mtp_loss()) : "")
       << " after step " << e.step() << "\n";
  }
  const auto& m = j.last_metrics();
  if (m.step() > 0) {
    os << "Last metrics:\n"
       << "  step " << m.step() << "/" << m.total_steps() << ", loss " << FormatNumber(m.loss())
       << ", grad norm " << FormatNumber(m.grad_norm(), 3) << ", lr " << m.lr() << "\n"
       << "  " << FormatNumber(m.tflops_per_device()) << " TFLOP/s per device, MFU "
       << FormatNumber(m.mfu() * 100, 1) << "% (against " << m.mfu_peak_source() << "), "
       << FormatNumber(m.tokens_per_second(), 0) << " tokens/s\n"
       << "  step " << FormatNumber(m.step_seconds(), 3) << " s: compute "
       << FormatNumber(m.compute_seconds(), 3) << " s, all-to-all "
       << FormatNumber(m.alltoall_seconds(), 3) << " s, gradient all-reduce "
       << FormatNumber(m.grad_sync_seconds(), 3) << " s"
       << (m.pipeline_bubble() > 0
               ? ", pipeline bubble " + FormatNumber(m.pipeline_bubble() * 100, 1) + "%"
               : "")
       << "\n"
       << PlanLine(j) << "  memory peak "
       << FormatNumber(static_cast<double>(m.memory_peak_bytes()) / 1e9, 3) << " GB on rank 0\n"
       << "  expert load max/mean " << FormatNumber(m.expert_load_imbalance(), 2);
    if (m.stragglers_size() > 0) {
      os << "\n  stragglers:";
      for (int r : m.stragglers()) {
        os << " rank " << r;
        if (r < m.rank_compute_seconds_size())
          os << " (compute " << FormatNumber(m.rank_compute_seconds(r), 3) << " s)";
      }
    }
    os << "\n";
    if (m.rank_compute_seconds_size() > 0) {
      os << "  per-rank compute s:";
      for (int r = 0; r < m.rank_compute_seconds_size(); ++r)
        os << " " << FormatNumber(m.rank_compute_seconds(r), 3);
      os << "\n";
    }
  }
  os << GoodputSection(j.goodput());
  os << CheckpointAdviceSection(j);
  if (j.events_size() > 0) {
    os << "Events:\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : j.events())
      rows.push_back(
          {"  " + Duration(now - e.time()) + " ago", e.type(), StateName(e.state()), e.message()});
    os << Table({"  AGE", "TYPE", "STATE", "MESSAGE"}, rows);
  }
  return EscapeControl(os.str(), /*keep_newlines=*/true);  // quotes names, paths, messages
}

}  // namespace moe::cli
