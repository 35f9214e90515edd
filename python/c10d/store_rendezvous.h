// Forming a tandem world through the c10d store that torch.distributed
// hands a backend (a TCPStore for env:// and tcp://, a FileStore for
// file://, torchrun's agent store), the way tandem's PMIx contract forms one
// through PMIx (docs/pytorch-backend.md, "How the ranks meet"):
//
//  1. every rank sets `tandem/host/<rank>` to its host name;
//  2. rank 0 chooses the address its in-process rendezvous listens on
//     (DMLC_NODE_HOST as given; else the address of DMLC_INTERFACE; else
//     127.0.0.1 when every rank named the same host; else, for the default
//     group, MASTER_ADDR when set (torch's rank 0 is the world's); else its
//     host name) and a port the kernel finds free there, and
//     sets `tandem/coordinator` to `host:port`;
//     Without TANDEM_SECRET in its environment (tandem launch and tandem k8s
//     render set one), rank 0 also draws a job secret and sets
//     `tandem/secret`: the tandem job is then exactly as private as the
//     store torch uses (gloo's connections have no authentication at all);
//  3. every other rank gets `tandem/coordinator` (torch's store waits up to
//     its own timeout for it), and `tandem/secret` when it has none;
//  4. every rank joins with tandem's explicit contract (TANDEM_WORLD_SIZE,
//     TANDEM_RANK, TANDEM_COORDINATOR) in place of whatever start-up
//     contract its environment carries, so that the world's ranks are the
//     group's ranks torch gave.
// The store torch gives a group is already prefixed with the group's name,
// so the keys of two groups never meet.
#pragma once

#include <map>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace tandem::c10d_backend {

/// What the ranks agree on through the store.
struct WorldRendezvous {
  std::string coordinator;  ///< host:port of rank 0's rendezvous
  std::string secret;       ///< the job secret; empty: the environment's
};

/// The rule of step 2: the host rank 0 announces, from its environment
/// `env` and every rank's host name (`hosts`, rank order); `default_group`
/// when the world is torch's default group. Throws ConfigError
/// (DMLC_INTERFACE names no interface).
std::string ChooseCoordinatorHost(const std::map<std::string, std::string>& env,
                                  const std::vector<std::string>& hosts, bool default_group);

/// The environment a rank joins the world with (step 4): `env` without the
/// variables of other start-up contracts that tandem reads first (DMLC_*
/// roles and counts, MX_CONFIG, TANDEM_ROLE, TANDEM_NUM_SERVERS,
/// TANDEM_RENDEZVOUS_IN_PROCESS, TANDEM_STARTUP_CONTRACT) and with
/// TANDEM_WORLD_SIZE=size, TANDEM_RANK=rank, TANDEM_COORDINATOR and (when
/// one was exchanged) TANDEM_SECRET from `agreed`.
std::map<std::string, std::string> WorldEnvironment(std::map<std::string, std::string> env,
                                                    int rank, int size,
                                                    const WorldRendezvous& agreed);

/// Steps 1-3 through `store`, for rank `rank` of `size`. Throws Timeout
/// when the store gives up (naming the rank and the key it waited for).
WorldRendezvous ExchangeCoordinator(::c10d::Store& store, int rank, int size,
                                    const std::map<std::string, std::string>& env,
                                    bool default_group);

}  // namespace tandem::c10d_backend
