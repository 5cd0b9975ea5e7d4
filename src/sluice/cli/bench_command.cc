// `sluice bench SCENARIO.yaml`: the flags, the checks a user gets before anything is set up,
// and the report and its plot; the runs themselves are testbed::RunBench (bench_runner.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/testbed/bench_runner.h"
#include "sluice/testbed/exec.h"
#include "sluice/testbed/scenario.h"
#include "sluice/testbed/testbed.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCommand = "bench";

std::string SelfPath() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("sluice") : p.string();
}

// Where bench/plot.py is: beside the working directory's bench/, or the source tree the
// binary was built in (<src>/build-*/bin/sluice).
std::string FindPlotScript() {
  std::vector<fs::path> candidates = {fs::path("bench/plot.py")};
  fs::path exe = SelfPath();
  candidates.push_back(exe.parent_path().parent_path().parent_path() / "bench/plot.py");
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
  }
  return "";
}

const char kUsageTail[] =
    "\npolicies: none (all local), full (all remote after batching), oracle (best of a\n"
    "sweep), or fixed:cut=K,ratio=R[,read=local|remote] as `sluice train` takes it.\n"
    "Needs root (network namespaces, tc, cgroups); exits 2 without it.\n";

}  // namespace

int BenchCommand(const std::vector<std::string>& args) {
  testbed::BenchOptions options;
  std::string policies = "none,full,oracle";
  bool no_verify = false;
  double hold_s = 0;
  double run_timeout_s = 600;
  FlagParser flags(kCommand,
                   "SCENARIO.yaml [--policies LIST] [--json OUT] [--plot OUT.png] "
                   "[--work-dir DIR] [--data-dir DIR]");
  flags.AddString("policies", &policies, "LIST", "comma-separated policies to run");
  flags.AddString("json", &options.json_out, "OUT", "write the report as JSON to OUT");
  flags.AddString("plot", &options.plot_out, "OUT.png",
                  "plot the report (bench/plot.py, /usr/bin/python3); also writes "
                  "OUT-sweep.png when an oracle ran");
  flags.AddString("work-dir", &options.work_dir, "DIR",
                  "logs, per-run JSON and the generated data (default: /tmp/sluice-bench)");
  flags.AddString("data-dir", &options.data_dir, "DIR",
                  "where data sets are generated (one folder per data set; default: the work dir)");
  flags.AddBool("no-verify", &no_verify, "skip the link and CPU verification");
  flags.AddDouble("run-timeout", &run_timeout_s, "S", "give up on one train run after S", 1, 1e6);
  flags.AddDouble("hold", &hold_s, "S",
                  "only set up (and verify) the testbed, stand S seconds, tear down", 0, 1e6);
  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError(kCommand, std::string(s.message()), flags.Usage() + kUsageTail);
  }
  if (flags.help_requested()) {
    std::fputs((flags.Usage() + kUsageTail).c_str(), stdout);
    return kExitOk;
  }
  if (flags.positional().size() != 1) {
    return UsageError(kCommand, "expected one SCENARIO.yaml", flags.Usage() + kUsageTail);
  }
  options.scenario_path = flags.positional()[0];
  options.policies = testbed::SplitBenchPolicies(policies);
  options.verify = !no_verify;
  options.hold_s = hold_s;
  options.run_timeout_s = run_timeout_s;
  if (options.work_dir.empty()) options.work_dir = "/tmp/sluice-bench";
  for (const std::string& p : options.policies) {
    bool known = p.rfind("fixed:", 0) == 0;
    for (const std::string& name : testbed::BenchPolicyNames()) known = known || p == name;
    if (!known) {
      std::string names;
      for (const std::string& name : testbed::BenchPolicyNames()) {
        absl::StrAppend(&names, name, ", ");
      }
      return UsageError(kCommand,
                        absl::StrCat("unknown policy '", p, "' (known: ", names, "fixed:...)"),
                        flags.Usage() + kUsageTail);
    }
  }
  StatusOr<testbed::Scenario> scenario = testbed::LoadScenario(options.scenario_path);
  if (!scenario.ok()) return ReportError(kCommand, scenario.status());
  if (Status s = testbed::CheckRoot(); !s.ok()) {
    std::fprintf(stderr, "sluice bench: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }

  testbed::StartBenchSignalThread();
  // Torn down before anything is reported.
  StatusOr<json> report = testbed::RunBench(options, *std::move(scenario));
  if (!report.ok()) {
    if (testbed::BenchSignal() != 0) {
      std::fprintf(stderr, "sluice bench: %s\n", std::string(report.status().message()).c_str());
      return 128 + testbed::BenchSignal();
    }
    return ReportError(kCommand, report.status());
  }
  const std::string text = report->dump(2) + "\n";
  if (!options.json_out.empty()) {
    std::ofstream out(options.json_out, std::ios::trunc);
    out << text;
    if (!out) {
      return ReportError(
          kCommand, absl::FailedPreconditionError(absl::StrCat("cannot write ", options.json_out)));
    }
  } else {
    std::fputs(text.c_str(), stdout);
  }
  if (!options.plot_out.empty()) {
    std::string json_path = options.json_out;
    if (json_path.empty()) {
      json_path = options.work_dir + "/report.json";
      std::ofstream(json_path, std::ios::trunc) << text;
    }
    const std::string script = FindPlotScript();
    if (script.empty()) {
      return ReportError(kCommand, absl::NotFoundError("bench/plot.py not found"));
    }
    StatusOr<testbed::ProgramResult> r =
        testbed::RunProgram({"/usr/bin/python3", script, json_path, options.plot_out});
    if (!r.ok() || r->exit_code != 0) {
      return ReportError(kCommand, absl::InternalError(absl::StrCat(
                                       "plotting failed: ",
                                       r.ok() ? r->output : std::string(r.status().message()))));
    }
  }
  return kExitOk;
}

}  // namespace sluice::cli
