// Whole-job restarts (`tandem launch --max-restarts N`): runs a job's
// attempts one after another, each under its own ProcessSupervisor, until
// one needs no restart (restart_policy.h decides). docs/launch.md
// ("Restarts") is the user's description.
//
// Every attempt is a whole job: the previous attempt's processes are all
// gone (ProcessSupervisor::Run returns only when every process group it
// created is), and the attempt gets a fresh identity from its launcher (a
// new secret and scheduler port), so nothing of an earlier attempt can join
// a later one. Each process finds the attempt's number in
// TANDEM_RESTART_COUNT (0 on the first start) and the limit in
// TANDEM_MAX_RESTARTS; resuming from a checkpoint is the program's part.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "base/environment.h"
#include "launch/process_supervisor.h"
#include "launch/restart_policy.h"

namespace tandem::launch {

/// The environment an attempt's processes start from: `launcher_env` with
/// TANDEM_RESTART_COUNT=restart_count and TANDEM_MAX_RESTARTS=max_restarts
/// (replacing values the launcher inherited). Pure.
std::map<std::string, std::string> AttemptEnvironment(
    const std::map<std::string, std::string>& launcher_env, int restart_count, int max_restarts);

/// One attempt of a job: gives the job a fresh identity, announces it,
/// starts every process on `supervisor` with environments built from
/// `env` (AttemptEnvironment's), runs the supervisor (Run) and returns the
/// outcome. An exception ends the restarts and propagates.
using JobAttempt = std::function<JobOutcome(ProcessSupervisor& supervisor,
                                            const std::map<std::string, std::string>& env)>;

/// Runs `attempt` under a new ProcessSupervisor(supervisor_options) with
/// restart count 0, then again with 1, 2, ... (appending to the log files
/// of SupervisorOptions::log_dir, not truncating them) while DecideRestart says
/// kRestart, waiting restarts.delay between attempts, and returns the exit
/// code of the last attempt: with max_restarts 0, or after an interrupt, or
/// when nothing failed, ProcessSupervisor::Run's; else the code of the
/// attempt's cause (AttemptCause), which differs from Run's only when a
/// survivor's end was reported before the cause's. With max_restarts 0
/// it is exactly one attempt and says nothing more; otherwise it writes one
/// "[launcher] " line to supervisor_options.stderr_fd per decision:
///  - "restarting the job (restart 1 of 3) after worker 1 (pid 10) killed by
///    signal 9 (SIGKILL); starting it again in 1 s";
///  - "job succeeded after 1 restart";
///  - "not restarting the job: <why>" (an interrupt, a permanent failure);
///  - "job failed after 4 attempts, no restart left (--max-restarts 3):
///    attempt 1: ...; attempt 2: ..." (every attempt's cause).
/// A SIGINT, SIGTERM or SIGHUP during the delay stops at once, with the
/// last attempt's code and the attempts line.
///
/// With SupervisorOptions::replace_departed_workers, the replacements of
/// single workers that left an elastic job come out of the same budget:
/// each attempt's supervisor may start max_restarts less the restarts and
/// replacements made before it, and the attempts' restarts count the
/// replacements too. TANDEM_RESTART_COUNT then counts both: the restarts
/// of the job and the replacements made before the process started (a
/// replacement's is its attempt's plus its number in the attempt).
///
/// Throws InvalidArgument for invalid `restarts`, and what `attempt` and
/// ProcessSupervisor throw. Thread: as ProcessSupervisor's (the thread
/// that lives as long as the job, with the signals it handles not handled
/// by other threads).
int RunWithRestarts(const RestartOptions& restarts, const SupervisorOptions& supervisor_options,
                    const base::Environment& launcher_env, const JobAttempt& attempt);

}  // namespace tandem::launch
