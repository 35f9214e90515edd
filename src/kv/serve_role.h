// Running a job's non-worker roles: the scheduler (membership only) and a
// parameter server (membership plus KvServer). `tandem server`,
// `tandem scheduler` and tandem::ServeAssignedRole() come here.
#pragma once

#include <map>
#include <string>

#include "tandem/cluster.h"

namespace tandem::kv {

/// Joins the job that `env` describes as `role` (kScheduler or kServer;
/// DMLC_ROLE in `env` must agree or be unset), serves until every node
/// leaves (Finalize), and returns 0; errors reach stderr with the role and
/// pid, and the result is 1. Blocks; call from main().
int RunRole(Role role, std::map<std::string, std::string> env);

}  // namespace tandem::kv
