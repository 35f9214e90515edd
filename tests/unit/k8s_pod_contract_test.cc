// The manifests of `tandem k8s render` against tandem's own contract
// readers: each pod's environment is the rendered container's variables
// plus what its controller sets (as docs/contracts.md and docs/deploy.md
// describe each controller), and DetectContract must place every pod: the
// right role or rank, the world size, the scheduler or coordinator.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cluster/contract_detection.h"
#include "k8s/job_description.h"
#include "k8s/render.h"

namespace tandem::k8s {
namespace {

using nlohmann::json;
using Vars = std::map<std::string, std::string>;

// The container's variables; a Secret reads as "secret", the pod IP as 127.0.0.31.
Vars ContainerEnv(const json& container) {
  Vars vars;
  for (const auto& e : container["env"]) {
    if (e.contains("value")) {
      vars[e["name"]] = e["value"];
    } else if (e["valueFrom"].contains("secretKeyRef")) {
      vars[e["name"]] = "secret";
    } else {
      vars[e["name"]] = "127.0.0.31";
    }
  }
  return vars;
}

Vars Merge(Vars a, const Vars& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

// One pod as its controller starts it.
struct Pod {
  std::string role;  // "scheduler", "server", "worker" or "" for peers
  int index = 0;     // within its role
  Vars env;
};

json Description(bool ps, bool elastic) {
  if (elastic) {
    return json::parse(R"({"name": "job", "namespace": "ns", "image": "i", "command": ["w"],
                           "workers": 3, "min_workers": 2})");
  }
  if (ps) {
    return json::parse(R"({"name": "job", "namespace": "ns", "image": "i", "command": ["w"],
                           "strategy": "parameter-server", "workers": 3, "servers": 2})");
  }
  return json::parse(R"({"name": "job", "namespace": "ns", "image": "i", "command": ["w"],
                         "workers": 3})");
}

int ContainerPort(const json& container) { return container["ports"][0]["containerPort"]; }

std::vector<Pod> PodsOf(Kind kind, const JobDescription& d, const std::vector<json>& objects) {
  std::vector<Pod> pods;
  const json& main = objects.back();
  const std::string n = d.name;
  switch (kind) {
    case Kind::kMXJob: {
      const char* types[] = {"Scheduler", "Server", "Worker"};
      const int port = ContainerPort(
          main["spec"]["mxReplicaSpecs"]["Scheduler"]["template"]["spec"]["containers"][0]);
      for (const char* type : types) {
        const json& r = main["spec"]["mxReplicaSpecs"][type];
        std::string role = type == std::string("Scheduler") ? "scheduler"
                           : type == std::string("Server")  ? "server"
                                                            : "worker";
        for (int i = 0; i < r["replicas"].get<int>(); ++i) {
          Vars op = {{"DMLC_ROLE", role},
                     {"DMLC_PS_ROOT_URI", n + "-scheduler-0"},
                     {"DMLC_PS_ROOT_PORT", std::to_string(port)},
                     {"DMLC_NUM_SERVER", std::to_string(d.servers)},
                     {"DMLC_NUM_WORKER", std::to_string(d.workers)},
                     {"DMLC_USE_KUBERNETES", "1"},
                     {"HOSTNAME", fmt::format("{}-{}-{}", n, role, i)}};
          pods.push_back(
              {role, i, Merge(ContainerEnv(r["template"]["spec"]["containers"][0]), op)});
        }
      }
      break;
    }
    case Kind::kPyTorchJob: {
      // With an elasticPolicy the operator adds torchrun's rendezvous
      // variables to what it sets for every Master/Worker job; WORLD_SIZE
      // counts every replica, the Master's too.
      const json& specs = main["spec"]["pytorchReplicaSpecs"];
      const int port = ContainerPort(specs["Master"]["template"]["spec"]["containers"][0]);
      const bool elastic = main["spec"].contains("elasticPolicy");
      int replicas = 0;
      for (const auto& [type, spec] : specs.items()) replicas += spec["replicas"].get<int>();
      int rank = 0;
      for (const char* type : {"Master", "Worker"}) {
        if (!specs.contains(type)) continue;
        for (int i = 0; i < specs[type]["replicas"].get<int>(); ++i, ++rank) {
          Vars op = {
              {"MASTER_ADDR", n + "-master-0"},
              {"MASTER_PORT", std::to_string(port)},
              {"RANK", std::to_string(rank)},
              {"WORLD_SIZE", std::to_string(replicas)},
              {"PET_NPROC_PER_NODE", main["spec"]["nprocPerNode"]},
              {"PET_NNODES", std::to_string(replicas)},
              {"PET_NODE_RANK", std::to_string(rank)},
              {"PET_MASTER_ADDR", n + "-master-0"},
              {"PET_MASTER_PORT", std::to_string(port)},
              {"HOSTNAME",
               fmt::format("{}-{}-{}", n, type == std::string("Master") ? "master" : "worker", i)}};
          std::string role;
          if (elastic) {
            const json& policy = main["spec"]["elasticPolicy"];
            op["PET_NNODES"] = fmt::format("{}:{}", policy["minReplicas"].get<int>(),
                                           policy["maxReplicas"].get<int>());
            op["PET_RDZV_ENDPOINT"] = fmt::format("{}-worker-0:{}", n, port);
            op["PET_RDZV_BACKEND"] = "c10d";
            op["PET_MAX_RESTARTS"] = std::to_string(policy["maxRestarts"].get<int>());
            role = type == std::string("Master") ? "scheduler" : "worker";
          }
          pods.push_back(
              {role, elastic && type == std::string("Worker") ? i : rank,
               Merge(ContainerEnv(specs[type]["template"]["spec"]["containers"][0]), op)});
        }
      }
      break;
    }
    case Kind::kMPIJob: {
      // Ranks see what mpirun gives them: OMPI_* and the -x variables, whose
      // values come from the launcher's environment.
      const json& launcher =
          main["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0];
      Vars launcher_env = ContainerEnv(launcher);
      Vars forwarded;
      const auto& cmd = launcher["command"];
      for (size_t i = 0; i + 1 < cmd.size(); ++i) {
        if (cmd[i] == "-x") forwarded[cmd[i + 1]] = launcher_env[cmd[i + 1]];
      }
      for (int i = 0; i < d.workers; ++i) {
        Vars op = {{"OMPI_COMM_WORLD_RANK", std::to_string(i)},
                   {"OMPI_COMM_WORLD_SIZE", std::to_string(d.workers)},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}};
        pods.push_back({"", i, Merge(forwarded, op)});
      }
      break;
    }
    case Kind::kTFJob: {
      // TF_CONFIG: every task's Service address at the tfjob-port, and the
      // pod's own task; the evaluator is never in the cluster.
      const json& specs = main["spec"]["tfReplicaSpecs"];
      const int port = ContainerPort(specs["Chief"]["template"]["spec"]["containers"][0]);
      json cluster = json::object();
      const std::pair<const char*, const char*> types[] = {
          {"Chief", "chief"}, {"Worker", "worker"}, {"PS", "ps"}};
      for (const auto& [type, key] : types) {
        if (!specs.contains(type)) continue;
        for (int i = 0; i < specs[type]["replicas"].get<int>(); ++i) {
          cluster[key].push_back(fmt::format("{}-{}-{}.{}.svc:{}", n, key, i, d.namespace_, port));
        }
      }
      int worker_index = 0;
      for (const auto& [type, key] : types) {
        if (!specs.contains(type)) continue;
        for (int i = 0; i < specs[type]["replicas"].get<int>(); ++i) {
          json config = {{"cluster", cluster},
                         {"task", {{"type", key}, {"index", i}}},
                         {"environment", "cloud"}};
          const bool server = std::string(key) == "ps";
          Vars op = {{"TF_CONFIG", config.dump()}};
          pods.push_back(
              {d.strategy == Strategy::kParameterServer ? (server ? "server" : "worker") : "",
               server ? i : worker_index++,
               Merge(ContainerEnv(specs[type]["template"]["spec"]["containers"][0]), op)});
        }
      }
      break;
    }
    case Kind::kTrainJob: {
      const json& runtime = objects[objects.size() - 2];
      const json& job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"];
      const json& trainer = main["spec"]["trainer"];
      for (int i = 0; i < trainer["numNodes"].get<int>(); ++i) {
        Vars op = {{"PET_NNODES", std::to_string(trainer["numNodes"].get<int>())},
                   {"PET_NODE_RANK", std::to_string(i)},
                   {"PET_NPROC_PER_NODE", std::to_string(trainer["numProcPerNode"].get<int>())},
                   {"PET_MASTER_ADDR", n + "-node-0-0." + n},
                   {"PET_MASTER_PORT", "29400"},
                   {"JOB_COMPLETION_INDEX", std::to_string(i)},
                   {"HOSTNAME", fmt::format("{}-node-0-{}", n, i)}};
        pods.push_back(
            {"", i, Merge(ContainerEnv(job["spec"]["template"]["spec"]["containers"][0]), op)});
      }
      break;
    }
    case Kind::kJobSet: {
      for (const auto& rj : main["spec"]["replicatedJobs"]) {
        const std::string role = rj["name"];
        for (int i = 0; i < rj["template"]["spec"]["completions"].get<int>(); ++i) {
          Vars op = {{"JOB_COMPLETION_INDEX", std::to_string(i)},
                     {"HOSTNAME", fmt::format("{}-{}-0-{}", n, role, i)}};
          pods.push_back(
              {d.strategy == Strategy::kParameterServer ? role : "", i,
               Merge(ContainerEnv(rj["template"]["spec"]["template"]["spec"]["containers"][0]),
                     op)});
        }
      }
      break;
    }
    case Kind::kIndexedJob: {
      for (const auto& o : objects) {
        if (o["kind"] != "Job") continue;
        const std::string job_name = o["metadata"]["name"];
        const std::string role =
            d.strategy == Strategy::kParameterServer ? job_name.substr(n.size() + 1) : "";
        for (int i = 0; i < o["spec"]["completions"].get<int>(); ++i) {
          Vars op = {{"JOB_COMPLETION_INDEX", std::to_string(i)},
                     {"HOSTNAME", fmt::format("{}-{}", job_name, i)}};
          pods.push_back(
              {role, i, Merge(ContainerEnv(o["spec"]["template"]["spec"]["containers"][0]), op)});
        }
      }
      break;
    }
    case Kind::kVolcanoJob: {
      // The env plugin's VC_TASK_INDEX, the svc plugin's host lists.
      Vars hosts;
      for (const auto& t : main["spec"]["tasks"]) {
        std::string task = t["name"], upper, list;
        for (char c : task) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        for (int i = 0; i < t["replicas"].get<int>(); ++i) {
          list += fmt::format("{}{}-{}-{}.{}", list.empty() ? "" : ",", n, task, i, n);
        }
        hosts["VC_" + upper + "_HOSTS"] = list;
        hosts["VC_" + upper + "_NUM"] = std::to_string(t["replicas"].get<int>());
      }
      for (const auto& t : main["spec"]["tasks"]) {
        const std::string task = t["name"];
        for (int i = 0; i < t["replicas"].get<int>(); ++i) {
          Vars op = Merge(hosts, {{"VC_TASK_INDEX", std::to_string(i)},
                                  {"HOSTNAME", fmt::format("{}-{}-{}", n, task, i)}});
          pods.push_back({d.strategy == Strategy::kParameterServer ? task : "", i,
                          Merge(ContainerEnv(t["template"]["spec"]["containers"][0]), op)});
        }
      }
      break;
    }
  }
  return pods;
}

struct Case {
  Kind kind;
  bool ps;
  bool elastic;
  const char* contract;     // the contract DetectContract must name
  const char* coordinator;  // the scheduler's or rank 0's host
  int port;
};

class K8sPodContract : public ::testing::TestWithParam<Case> {};

TEST_P(K8sPodContract, EveryPodFindsItsPlace) {
  const Case& c = GetParam();
  JobDescription d = ParseJobDescription(Description(c.ps, c.elastic));
  auto objects = Render(d, c.kind, "secret");
  auto pods = PodsOf(c.kind, d, objects);
  // A TFJob has no scheduler pod (the chief hosts the scheduler).
  ASSERT_EQ(static_cast<int>(pods.size()),
            c.kind == Kind::kTFJob ? d.workers + (c.ps ? d.servers : 0) : d.TotalPods());
  std::map<std::string, int> per_role;
  std::vector<int> ranks;
  for (const Pod& pod : pods) {
    SCOPED_TRACE(fmt::format("{} {} {}", KindName(c.kind), pod.role, pod.index));
    auto detected = cluster::DetectContract(base::Environment(pod.env));
    EXPECT_EQ(pod.env.at("TANDEM_SECRET"), "secret");
    EXPECT_EQ(pod.env.at("TANDEM_JOB_ID"), "ns/job");
    EXPECT_EQ(detected.name.rfind(c.contract, 0), 0u) << detected.ToString();
    if (detected.dmlc) {
      const auto& p = *detected.dmlc;
      EXPECT_EQ(p.scheduler_host, c.coordinator);
      EXPECT_EQ(p.scheduler_port, c.port);
      EXPECT_EQ(p.num_workers, d.workers);
      EXPECT_EQ(p.num_servers, d.servers);
      EXPECT_TRUE(p.use_kubernetes);
      // An elastic job's pods all know how few workers it may go on with.
      EXPECT_EQ(pod.env.count("TANDEM_MIN_WORKERS") ? pod.env.at("TANDEM_MIN_WORKERS") : "",
                c.elastic ? std::to_string(d.min_workers) : "");
      const char* names[] = {"scheduler", "server", "worker"};
      EXPECT_EQ(pod.role, names[static_cast<int>(p.role)]);
      ++per_role[pod.role];
    } else {
      ASSERT_TRUE(detected.peers) << detected.ToString();
      const auto& p = *detected.peers;
      EXPECT_EQ(p.coordinator_host, c.coordinator);
      EXPECT_EQ(p.coordinator_port, c.port);
      if (p.role) {  // Volcano's scheduler/server/worker tasks
        const char* names[] = {"scheduler", "server", "worker"};
        EXPECT_EQ(pod.role, names[static_cast<int>(*p.role)]);
        EXPECT_EQ(p.rank, pod.index);
        ++per_role[pod.role];
      } else if (p.num_servers && *p.num_servers > 0) {  // TF_CONFIG's ps tasks
        EXPECT_EQ(p.world_size, d.workers + d.servers);
        EXPECT_EQ(*p.num_servers, d.servers);
        const bool server = p.rank >= d.workers;
        EXPECT_EQ(pod.role, server ? "server" : "worker");
        EXPECT_EQ(p.rank, server ? d.workers + pod.index : pod.index);
        ++per_role[pod.role];
      } else {
        EXPECT_EQ(p.world_size, d.workers);
        ranks.push_back(p.rank);
      }
    }
  }
  if (c.elastic) {
    EXPECT_EQ(per_role, (std::map<std::string, int>{{"scheduler", 1}, {"worker", d.workers}}));
  } else if (c.ps && c.kind == Kind::kTFJob) {
    // No scheduler pod: the chief (worker 0) hosts the scheduler in-process.
    EXPECT_EQ(per_role, (std::map<std::string, int>{{"server", d.servers}, {"worker", d.workers}}));
  } else if (c.ps) {
    EXPECT_EQ(per_role, (std::map<std::string, int>{
                            {"scheduler", 1}, {"server", d.servers}, {"worker", d.workers}}));
  } else {
    std::sort(ranks.begin(), ranks.end());
    EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, K8sPodContract,
    ::testing::Values(Case{Kind::kMXJob, true, false, "dmlc", "job-scheduler-0", 9091},
                      Case{Kind::kPyTorchJob, false, false, "pytorchjob", "job-master-0", 29500},
                      Case{Kind::kPyTorchJob, false, true, "dmlc", "job-master-0", 29500},
                      Case{Kind::kMPIJob, false, false, "ompi", "job-worker-0.job.ns.svc", 29500},
                      Case{Kind::kTFJob, true, false, "tfjob", "job-chief-0.ns.svc", 9091},
                      Case{Kind::kTFJob, false, false, "tfjob", "job-chief-0.ns.svc", 29500},
                      Case{Kind::kTrainJob, false, false, "trainjob", "job-node-0-0.job", 29400},
                      Case{Kind::kJobSet, true, false, "dmlc", "job-scheduler-0-0.job", 9091},
                      Case{Kind::kJobSet, false, false, "indexed-job", "job-worker-0-0.job", 29500},
                      Case{Kind::kIndexedJob, true, false, "dmlc", "job-scheduler-0.job", 9091},
                      Case{Kind::kIndexedJob, false, false, "indexed-job", "job-0.job", 29500},
                      Case{Kind::kVolcanoJob, true, false, "volcano", "job-scheduler-0.job", 9091},
                      Case{Kind::kVolcanoJob, false, false, "volcano", "job-worker-0.job", 29500}),
    [](const auto& test) {
      std::string name = KindName(test.param.kind);
      name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
      return name + (test.param.ps        ? "_ps"
                     : test.param.elastic ? "_elastic_collectives"
                                          : "_collectives");
    });

}  // namespace
}  // namespace tandem::k8s
