// The loop behind tandem::elastic::Run (include/tandem/elastic.h), over any
// source of the current world and of a regroup: the public Run passes a
// Collectives' own, the unit tests a CollectiveService's.
#pragma once

#include <functional>

#include "tandem/cluster.h"
#include "tandem/collective.h"
#include "tandem/elastic.h"

namespace tandem::collective {

/// Syncs `state` over `world()`, then calls `train`; on MembershipChanged
/// restores the state, calls `regroup`, the reset callbacks and Sync again
/// (again while changes keep interrupting that), then `train` again.
/// `check_joins` (may be empty) runs after each of the state's commits
/// meanwhile. See tandem::elastic::Run.
void RunElastic(elastic::State& state, const std::function<Communicator&()>& world,
                const std::function<Members()>& regroup, const std::function<void()>& train,
                const std::function<void()>& check_joins = {});

}  // namespace tandem::collective
