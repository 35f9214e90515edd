// `tandem k8s render`: the job description's parser (every bad field is
// named) and the properties each kind's manifests must have for tandem's
// contract readers (docs/contracts.md). Schema validation of the same
// manifests is in tests/system/test_k8s_render.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "k8s/job_description.h"
#include "k8s/json_scan.h"
#include "k8s/render.h"
#include "tandem/error.h"

namespace tandem::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json PsJob() {
  return json::parse(R"({
    "name": "mnist", "namespace": "ml", "image": "tandem:1",
    "command": ["python3", "train.py"], "strategy": "parameter-server",
    "workers": 3, "servers": 2,
    "resources": {"cpu": "4", "memory": "8Gi", "gpus": 1},
    "checkpoint": {"claim": "ckpt"}, "metrics_port": 9100})");
}

json CollectivesJob() {
  return json::parse(R"({"name": "resnet", "image": "tandem:1", "command": ["./train"],
                         "workers": 4})");
}

std::string ParseError(const json& doc) {
  try {
    ParseJobDescription(doc);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument for " << doc.dump();
  return "";
}

// ---- the description ------------------------------------------------------------

TEST(K8sJobDescription, DefaultsForCollectives) {
  JobDescription d = ParseJobDescription(CollectivesJob());
  EXPECT_EQ(d.namespace_, "default");
  EXPECT_EQ(d.strategy, Strategy::kCollectives);
  EXPECT_EQ(d.servers, 0);
  EXPECT_EQ(d.port, 29500);
  EXPECT_EQ(d.shm_size, "1Gi");
  EXPECT_EQ(d.restart_policy, RestartPolicy::kExitCode);
  EXPECT_EQ(d.backoff_limit, 3);
  EXPECT_EQ(d.secret_name, "resnet-tandem-secret");
  EXPECT_EQ(d.secret_key, "TANDEM_SECRET");
  EXPECT_TRUE(d.generate_secret);
  EXPECT_FALSE(d.gang_volcano);
  EXPECT_EQ(d.TotalPods(), 4);
}

TEST(K8sJobDescription, DefaultsForParameterServer) {
  json doc = PsJob();
  doc.erase("servers");
  JobDescription d = ParseJobDescription(doc);
  EXPECT_EQ(d.servers, 1);
  EXPECT_EQ(d.port, 9091);
  EXPECT_EQ(d.TotalPods(), 1 + 1 + 3);
  // Servers get the workers' CPU and memory but no GPU unless asked.
  EXPECT_EQ(d.server_resources.cpu, "4");
  EXPECT_EQ(d.server_resources.memory, "8Gi");
  EXPECT_EQ(d.server_resources.gpus, 0);
  EXPECT_EQ(d.checkpoint_mount_path, "/checkpoints");
}

TEST(K8sJobDescription, NamingASecretReferencesIt) {
  json doc = CollectivesJob();
  doc["secret"] = {{"name", "team-secret"}};
  JobDescription d = ParseJobDescription(doc);
  EXPECT_FALSE(d.generate_secret);
  EXPECT_EQ(d.secret_name, "team-secret");
  doc["secret"]["generate"] = true;
  EXPECT_TRUE(ParseJobDescription(doc).generate_secret);
}

struct BadField {
  const char* name;
  const char* patch;  // merged into the base description (JSON merge patch)
  bool ps;            // base: PsJob() or CollectivesJob()
  const char* message;
};

class K8sBadField : public ::testing::TestWithParam<BadField> {};

TEST_P(K8sBadField, NamesTheField) {
  const BadField& c = GetParam();
  json doc = c.ps ? PsJob() : CollectivesJob();
  doc.merge_patch(json::parse(c.patch));
  EXPECT_THAT(ParseError(doc), HasSubstr(c.message)) << c.patch;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, K8sBadField,
    ::testing::Values(
        BadField{"NoName", R"({"name": null})", false, "name is required"},
        BadField{"NameUpper", R"({"name": "Net"})", false,
                 "name must be lower-case letters, digits and '-' only, got 'Net'"},
        BadField{"NameDigitFirst", R"({"name": "1net"})", false,
                 "name must be starting with a letter, got '1net'"},
        BadField{"NameTooLong", R"({"name": "abcdefghijabcdefghijabcdefghijabcdefghijx"})", false,
                 "name must be at most 40 characters"},
        BadField{"NameNumber", R"({"name": 3})", false, "name must be a string, got 3"},
        BadField{"Namespace", R"({"namespace": "ML"})", false, "namespace must be"},
        BadField{"NoImage", R"({"image": null})", false, "image is required"},
        BadField{"ImageSpace", R"({"image": "a b"})", false, "image must be a non-empty image"},
        BadField{"NoCommand", R"({"command": null})", false, "command is required"},
        BadField{"EmptyCommand", R"({"command": []})", false, "command must be a non-empty array"},
        BadField{"CommandNumber", R"({"command": ["a", 2]})", false,
                 "command[1] must be a string, got 2"},
        BadField{"CommandEmptyProgram", R"({"command": [""]})", false, "command[0] must name"},
        BadField{"Strategy", R"({"strategy": "allreduce"})", false,
                 "strategy must be 'parameter-server' or 'collectives', got 'allreduce'"},
        BadField{"WorkersZero", R"({"workers": 0})", false,
                 "workers must be a whole number in 1..65536, got 0 (number)"},
        BadField{"WorkersText", R"({"workers": "4"})", false,
                 "workers must be a whole number in 1..65536, got \"4\" (string)"},
        BadField{"WorkersFraction", R"({"workers": 1.5})", false,
                 "workers must be a whole number in 1..65536, got 1.5"},
        BadField{"MinWorkersZero", R"({"min_workers": 0})", false,
                 "min_workers must be a whole number in 1..4, got 0"},
        BadField{"MinWorkersAboveWorkers", R"({"min_workers": 5})", false,
                 "min_workers must be a whole number in 1..4, got 5"},
        BadField{"ProcessesPerNodeZero", R"({"processes_per_node": 0})", false,
                 "processes_per_node must be a whole number in 1..4096, got 0"},
        BadField{"ServersZeroPs", R"({"servers": 0})", true,
                 "servers must be a whole number in 1..65536, got 0"},
        BadField{"ServersInCollectives", R"({"servers": 2})", false,
                 "servers must be 0 for strategy 'collectives'"},
        BadField{"AllRolesCollectives", R"({"command_runs_all_roles": true})", false,
                 "command_runs_all_roles must be false for strategy 'collectives'"},
        BadField{"AllRolesText", R"({"command_runs_all_roles": "yes"})", true,
                 "command_runs_all_roles must be true or false"},
        BadField{"PortZero", R"({"port": 0})", false,
                 "port must be a whole number in 1..65535, got 0"},
        BadField{"PortHigh", R"({"port": 70000})", false,
                 "port must be a whole number in 1..65535, got 70000"},
        BadField{"Cpu", R"({"resources": {"cpu": "four"}})", false,
                 "resources.cpu must be a Kubernetes quantity"},
        BadField{"Memory", R"({"resources": {"memory": "8 GB"}})", false,
                 "resources.memory must be a Kubernetes quantity"},
        BadField{"Gpus", R"({"resources": {"gpus": -1}})", false,
                 "resources.gpus must be a whole number in 0..1024, got -1"},
        BadField{"ResourcesUnknown", R"({"resources": {"gpu": 1}})", false,
                 "unknown field 'resources.gpu'"},
        BadField{"ServerResourcesCollectives", R"({"server_resources": {"cpu": "1"}})", false,
                 "server_resources is for strategy 'parameter-server'"},
        BadField{"ServerSelectorCollectives", R"({"server_node_selector": {"pool": "cpu"}})", false,
                 "server_node_selector is for strategy 'parameter-server'"},
        BadField{"NodeSelectorValue", R"({"node_selector": {"pool": 1}})", false,
                 "node_selector.pool must be a string, got 1"},
        BadField{"ServerSelectorValue", R"({"server_node_selector": {"pool": true}})", true,
                 "server_node_selector.pool must be a string, got true"},
        BadField{"ServerCpu", R"({"server_resources": {"cpu": "x"}})", true,
                 "server_resources.cpu must be a Kubernetes quantity"},
        BadField{"GpuResource", R"({"gpu_resource": "gpu"})", false,
                 "gpu_resource must be an extended resource name"},
        BadField{"Shm", R"({"shm_size": "lots"})", false, "shm_size must be a Kubernetes quantity"},
        BadField{"HostNetwork", R"({"host_network": 1})", false,
                 "host_network must be true or false, got 1"},
        BadField{"CheckpointNoClaim", R"({"checkpoint": {"mount_path": "/c"}})", false,
                 "checkpoint.claim is required"},
        BadField{"CheckpointRelative", R"({"checkpoint": {"claim": "c", "mount_path": "c"}})",
                 false, "checkpoint.mount_path must be an absolute path"},
        BadField{"CheckpointShm", R"({"checkpoint": {"claim": "c", "mount_path": "/dev/shm"}})",
                 false, "other than /dev/shm"},
        BadField{"CheckpointUnknown", R"({"checkpoint": {"claim": "c", "size": "1Gi"}})", false,
                 "unknown field 'checkpoint.size'"},
        BadField{"CheckpointNotObject", R"({"checkpoint": "pvc"})", false,
                 "checkpoint must be an object"},
        BadField{"MetricsPort", R"({"metrics_port": 65536})", false,
                 "metrics_port must be a whole number in 0..65535, got 65536"},
        BadField{"MetricsIsPort", R"({"metrics_port": 29500})", false,
                 "metrics_port must differ from port"},
        BadField{"Restart", R"({"restart_policy": "Always"})", false,
                 "restart_policy must be 'ExitCode', 'OnFailure' or 'Never', got 'Always'"},
        BadField{"Backoff", R"({"backoff_limit": -1})", false,
                 "backoff_limit must be a whole number in 0..1000, got -1"},
        BadField{"SecretName", R"({"secret": {"name": "My_Secret"}})", false,
                 "secret.name must be"},
        BadField{"SecretKey", R"({"secret": {"key": "a/b"}})", false,
                 "secret.key must be a Secret key"},
        BadField{"SecretGenerate", R"({"secret": {"generate": "no"}})", false,
                 "secret.generate must be true or false"},
        BadField{"SecretUnknown", R"({"secret": {"value": "x"}})", false,
                 "unknown field 'secret.value'"},
        BadField{"Gang", R"({"gang_scheduling": {"scheduler": "kueue"}})", false,
                 "gang_scheduling.scheduler must be 'volcano' or 'none', got 'kueue'"},
        BadField{"QueueWithoutVolcano", R"({"gang_scheduling": {"queue": "q"}})", false,
                 "need gang_scheduling.scheduler 'volcano'"},
        BadField{"Queue", R"({"gang_scheduling": {"scheduler": "volcano", "queue": "Q"}})", false,
                 "gang_scheduling.queue must be"},
        BadField{"EnvValue", R"({"env": {"A": 1}})", false, "env.A must be a string, got 1"},
        BadField{"EnvName", R"({"env": {"1A": "x"}})", false, "env has the variable name '1A'"},
        BadField{"EnvNotObject", R"({"env": ["A=1"]})", false, "env must be an object"},
        BadField{"LabelPrefix", R"({"labels": {"tandem.io/job": "x"}})", false,
                 "labels.tandem.io/job uses the prefix tandem.io/"},
        BadField{"Unknown", R"({"replicas": 3})", false, "unknown field 'replicas'"}),
    [](const auto& test) { return std::string(test.param.name); });

TEST(K8sJobDescription, RejectsANonObject) {
  EXPECT_THAT(ParseError(json::array()), HasSubstr("must be a JSON object, got array"));
}

// ---- the description's text (hostile input) --------------------------------------

// A valid collectives description with `member` (text such as "\"workers\": 2")
// added as its last member.
std::string TextWith(const std::string& member) {
  return R"({"name": "a", "image": "i", "command": ["x"], )" + member + "}";
}

std::string Repeated(const std::string& piece, size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i) out += piece;
  return out;
}

// `depth` arrays, one inside the other.
std::string NestedArrays(size_t depth) { return Repeated("[", depth) + Repeated("]", depth); }

std::string TextError(const std::string& text) {
  try {
    ParseJobDescriptionText(text, "job.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument for " << text.substr(0, 200);
  return "";
}

struct BadText {
  std::string name;
  std::string text;
  std::vector<std::string> fragments;  // each must be in the message
};

// gtest prints a failing case by its name, not its 100 000 brackets.
void PrintTo(const BadText& c, std::ostream* os) { *os << c.name; }

class K8sBadText : public ::testing::TestWithParam<BadText> {};

TEST_P(K8sBadText, NamesTheFileTheFieldAndTheLimit) {
  const std::string message = TextError(GetParam().text);
  EXPECT_THAT(message, ::testing::StartsWith("job.json: "));
  for (const auto& fragment : GetParam().fragments) EXPECT_THAT(message, HasSubstr(fragment));
}

std::vector<BadText> BadTexts() {
  // The root object and env are 2 levels, so the 63rd array under env.A is
  // the 65th level: offset prefix + 62, byte prefix + 63.
  const std::string env_prefix = TextWith(R"("env": {"A": )");
  const std::string env_prefix_bytes =
      std::to_string(env_prefix.size() - 1 + kMaxJobDescriptionDepth - 1);
  std::string deep_labels;
  for (int i = 0; i < 1000; ++i) deep_labels += R"({"a": )";
  deep_labels += R"("x")" + Repeated("}", 1000);
  return {
      {"EnvNestedArrays100000",
       TextWith(R"("env": {"A": )" + NestedArrays(100000) + "}"),
       {"job.json: env.A[0][0][0][0]... nests deeper than 64 levels",
        "at byte " + env_prefix_bytes + " (line 1, column " + env_prefix_bytes + ")"}},
      {"EnvNestedOneTooMany",
       TextWith(R"("env": {"A": )" + NestedArrays(kMaxJobDescriptionDepth - 1) + "}"),
       {"env.A[0][0][0][0]... nests deeper than 64 levels"}},
      {"EnvNestedAtTheLimit",
       TextWith(R"("env": {"A": )" + NestedArrays(kMaxJobDescriptionDepth - 2) + "}"),
       {"env.A must be a string, got an array of 1 element(s)"}},
      {"LabelsNestedObjects",
       TextWith(R"("labels": )" + deep_labels),
       {"labels.a.a.a.a.a... nests deeper than 64 levels"}},
      {"TopLevelArrays", NestedArrays(100000), {"[0][0][0][0][0][0]... nests deeper than 64"}},
      {"SecondLine",
       "{\"name\": \"a\",\n \"env\": " + Repeated("[", 100),
       {"env[0][0][0][0][0]... nests deeper", "(line 2, column 72)"}},
      {"Workers1e400",
       TextWith(R"("workers": 1e400)"),
       {"job.json: workers must be a whole number in 1..65536, got 1e400 (beyond a double's "
        "range) at byte 58"}},
      {"WorkersMinus1e400",
       TextWith(R"("workers": -1e400)"),
       {"workers must be a whole number in 1..65536, got -1e400"}},
      {"WorkersFourHundredDigits",
       TextWith(R"("workers": 1)" + Repeated("0", 400)),
       {"workers must be a whole number in 1..65536, got 1" + std::string(39, '0') +
        "... (beyond a double's range)"}},
      {"Gpus1e999",
       TextWith(R"("resources": {"gpus": 1e999})"),
       {"resources.gpus must be a whole number in 0..1024, got 1e999"}},
      {"Name1e400", TextWith(R"("name": 1e400)"), {"job.json: name holds 1e400"}},
      {"EnvValue1e400", TextWith(R"("env": {"A": 1e400})"), {"env.A holds 1e400"}},
      {"WorkersMinus1",
       TextWith(R"("workers": -1)"),
       {"job.json: workers must be a whole number in 1..65536, got -1 (number)"}},
      {"WorkersFraction",
       TextWith(R"("workers": 2.5)"),
       {"job.json: workers must be a whole number in 1..65536, got 2.5 (number)"}},
      {"WorkersWholeFloat",
       TextWith(R"("workers": 2.0)"),
       {"workers must be a whole number in 1..65536, got 2.0 (number)"}},
      {"WorkersText",
       TextWith(R"("workers": "two")"),
       {R"(job.json: workers must be a whole number in 1..65536, got "two" (string))"}},
      {"WorkersUint64Max",
       TextWith(R"("workers": 18446744073709551615)"),
       {"workers must be a whole number in 1..65536, got 18446744073709551615 (number)"}},
      {"Workers1e300",
       TextWith(R"("workers": 1e300)"),
       {"workers must be a whole number in 1..65536, got 1e+300 (number)"}},
      {"WorkersArray",
       TextWith(R"("workers": [4])"),
       {"workers must be a whole number in 1..65536, got an array of 1 element(s)"}},
      {"BackoffMinus1",
       TextWith(R"("backoff_limit": -1)"),
       {"backoff_limit must be a whole number in 0..1000, got -1 (number)"}},
      {"SyntaxInAField",
       TextWith(R"("workers": 4x)"),
       {"job.json: not valid JSON at byte 59 (in workers): parse error at line 1, column 59"}},
      {"Truncated", TextWith(R"("env": {"A": "x")").substr(0, 60), {"not valid JSON at byte"}},
      {"Empty", "", {"job.json: not valid JSON at byte 1"}},
      {"NotAnObject", "[1]", {"job.json: the job description must be a JSON object, got array"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Texts, K8sBadText, ::testing::ValuesIn(BadTexts()),
                         [](const auto& test) { return test.param.name; });

TEST(K8sJobDescriptionText, ReadsAValidDescription) {
  const JobDescription d = ParseJobDescriptionText(
      TextWith(R"("workers": 8, "env": {"A": "1"}, "resources": {"gpus": 2})"), "job.json");
  EXPECT_EQ(d.workers, 8);
  EXPECT_EQ(d.env.at("A"), "1");
  EXPECT_EQ(d.worker_resources.gpus, 2);
}

// ParseJobDescription is handed a value, not text: its messages must not walk
// a value of any depth (dump() would recurse 100 000 frames deep).
TEST(K8sJobDescription, DeepValueIsNamedWithoutRecursion) {
  json nested = json::array();
  for (int i = 0; i < 100000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(nested));
    nested = std::move(outer);
  }
  json doc = CollectivesJob();
  doc["env"]["A"] = std::move(nested);
  EXPECT_THAT(ParseError(doc), HasSubstr("env.A must be a string, got an array of 1 element(s)"));
}

struct PathAt {
  std::string text;
  size_t byte;
  std::string path;
};

class K8sJsonPathAt : public ::testing::TestWithParam<PathAt> {};

TEST_P(K8sJsonPathAt, NamesTheValueAtAByte) {
  EXPECT_EQ(JsonPathAt(GetParam().text, GetParam().byte), GetParam().path);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, K8sJsonPathAt,
    ::testing::Values(PathAt{R"({"a": 1})", 7, "a"}, PathAt{R"({"a": [1, 2]})", 11, "a[1]"},
                      PathAt{R"({"a": {"b\"c": [0, {"d": 1}]}})", 26, "a.b\\\"c[1].d"},
                      PathAt{R"([[0], [1, [2]]])", 12, "[1][1][0]"}, PathAt{R"({"a": 1})", 1, ""},
                      PathAt{R"({")" + std::string(50, 'k') + R"(": 1})", 55,
                             std::string(40, 'k') + "..."}));

// ---- the kinds ----------------------------------------------------------------

// Pods the rendered objects ask for (an MPI launcher not counted).
int CountPods(const std::vector<json>& objects) {
  int pods = 0;
  for (const auto& o : objects) {
    const std::string kind = o["kind"];
    const json& spec = o.contains("spec") ? o["spec"] : json::object();
    if (kind == "MXJob" || kind == "PyTorchJob" || kind == "TFJob") {
      const char* specs = kind == "MXJob"        ? "mxReplicaSpecs"
                          : kind == "PyTorchJob" ? "pytorchReplicaSpecs"
                                                 : "tfReplicaSpecs";
      for (const auto& [type, r] : spec[specs].items()) pods += r["replicas"].get<int>();
    } else if (kind == "MPIJob") {
      pods += spec["mpiReplicaSpecs"]["Worker"]["replicas"].get<int>();
    } else if (kind == "TrainJob") {
      pods += spec["trainer"]["numNodes"].get<int>();
    } else if (kind == "JobSet") {
      for (const auto& r : spec["replicatedJobs"]) {
        pods += r["replicas"].get<int>() * r["template"]["spec"]["completions"].get<int>();
      }
    } else if (kind == "Job" && o["apiVersion"] == "batch/v1") {
      pods += spec["completions"].get<int>();
    } else if (kind == "Job") {
      for (const auto& t : spec["tasks"]) pods += t["replicas"].get<int>();
    }
  }
  return pods;
}

// Every container of every pod template in `node`, found by walking it.
void CollectContainers(const json& node, std::vector<json>* out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "containers" && value.is_array()) {
        for (const auto& c : value) out->push_back(c);
      } else {
        CollectContainers(value, out);
      }
    }
  } else if (node.is_array()) {
    for (const auto& v : node) CollectContainers(v, out);
  }
}

std::map<std::string, json> EnvOf(const json& container) {
  std::map<std::string, json> env;
  for (const auto& e : container["env"]) {
    env[e["name"]] = e.contains("value") ? e["value"] : e["valueFrom"];
  }
  return env;
}

struct KindCase {
  Kind kind;
  bool ps;
  bool supported;
};

class K8sKind : public ::testing::TestWithParam<KindCase> {};

TEST_P(K8sKind, RendersEveryPodWithTheSecretOrRefuses) {
  const KindCase& c = GetParam();
  JobDescription d = ParseJobDescription(c.ps ? PsJob() : CollectivesJob());
  if (!c.supported) {
    try {
      Render(d, c.kind, "00");
      ADD_FAILURE() << KindName(c.kind) << " rendered a job it cannot run";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("kind ") + KindName(c.kind) + " runs"));
    }
    return;
  }
  auto objects = Render(d, c.kind, "feedface");
  ASSERT_FALSE(objects.empty());
  EXPECT_EQ(objects[0]["kind"], "Secret");
  EXPECT_EQ(objects[0]["stringData"]["TANDEM_SECRET"], "feedface");
  // A TFJob has no scheduler pod: the chief hosts the scheduler.
  EXPECT_EQ(CountPods(objects), c.kind == Kind::kTFJob && c.ps ? d.TotalPods() - 1 : d.TotalPods());
  std::vector<json> containers;
  for (const auto& o : objects) {
    EXPECT_TRUE(o.contains("apiVersion") && o.contains("kind")) << o.dump();
    EXPECT_FALSE(o["metadata"]["name"].get<std::string>().empty());
    CollectContainers(o, &containers);
  }
  ASSERT_FALSE(containers.empty());
  for (const auto& container : containers) {
    auto env = EnvOf(container);
    EXPECT_EQ(env["TANDEM_SECRET"],
              json({{"secretKeyRef", {{"name", d.secret_name}, {"key", "TANDEM_SECRET"}}}}));
    EXPECT_EQ(env["TANDEM_JOB_ID"], d.namespace_ + "/" + d.name);
    EXPECT_EQ(container["image"], "tandem:1");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, K8sKind,
    ::testing::Values(
        KindCase{Kind::kMXJob, true, true}, KindCase{Kind::kMXJob, false, false},
        KindCase{Kind::kPyTorchJob, true, false}, KindCase{Kind::kPyTorchJob, false, true},
        KindCase{Kind::kMPIJob, true, false}, KindCase{Kind::kMPIJob, false, true},
        KindCase{Kind::kTFJob, true, true}, KindCase{Kind::kTFJob, false, true},
        KindCase{Kind::kTrainJob, true, false}, KindCase{Kind::kTrainJob, false, true},
        KindCase{Kind::kJobSet, true, true}, KindCase{Kind::kJobSet, false, true},
        KindCase{Kind::kIndexedJob, true, true}, KindCase{Kind::kIndexedJob, false, true},
        KindCase{Kind::kVolcanoJob, true, true}, KindCase{Kind::kVolcanoJob, false, true}),
    [](const auto& test) {
      std::string name = KindName(test.param.kind);
      name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
      return name + (test.param.ps ? "_ps" : "_collectives");
    });

TEST(K8sKinds, NamesRoundTrip) {
  for (Kind kind : AllKinds()) EXPECT_EQ(ParseKind(KindName(kind)), kind);
  EXPECT_FALSE(ParseKind("xgboostjob"));
}

TEST(K8sKinds, ReferencedSecretIsNotRendered) {
  json doc = CollectivesJob();
  doc["secret"] = {{"name", "team"}};
  auto objects = Render(ParseJobDescription(doc), Kind::kIndexedJob, "");
  for (const auto& o : objects) EXPECT_NE(o["kind"], "Secret");
}

TEST(K8sKinds, IndexedJobCollectivesInjectWorldSizeAndSubdomain) {
  auto objects = Render(ParseJobDescription(CollectivesJob()), Kind::kIndexedJob, "x");
  ASSERT_EQ(objects.size(), 3u);  // Secret, Service, Job
  EXPECT_EQ(objects[1]["kind"], "Service");
  EXPECT_EQ(objects[1]["spec"]["clusterIP"], "None");
  const json& pod = objects[2]["spec"]["template"]["spec"];
  EXPECT_EQ(pod["subdomain"], "resnet");
  auto env = EnvOf(pod["containers"][0]);
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["TANDEM_SUBDOMAIN"], "resnet");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
}

TEST(K8sKinds, ParameterServerPodsRunTheirRole) {
  JobDescription d = ParseJobDescription(PsJob());
  auto objects = Render(d, Kind::kIndexedJob, "x");
  std::map<std::string, json> by_role;
  for (const auto& o : objects) {
    if (o["kind"] != "Job") continue;
    const json& c = o["spec"]["template"]["spec"]["containers"][0];
    auto env = EnvOf(c);
    by_role[env["DMLC_ROLE"]] = c["command"];
    EXPECT_EQ(env["DMLC_PS_ROOT_URI"], "mnist-scheduler-0.mnist");
    EXPECT_EQ(env["DMLC_NUM_WORKER"], "3");
    EXPECT_EQ(env["DMLC_NUM_SERVER"], "2");
  }
  EXPECT_EQ(by_role["scheduler"], json({"tandem", "scheduler"}));
  EXPECT_EQ(by_role["server"], json({"tandem", "server"}));
  EXPECT_EQ(by_role["worker"], json({"python3", "train.py"}));

  json doc = PsJob();
  doc["command_runs_all_roles"] = true;
  for (const auto& o : Render(ParseJobDescription(doc), Kind::kIndexedJob, "x")) {
    if (o["kind"] != "Job") continue;
    EXPECT_EQ(o["spec"]["template"]["spec"]["containers"][0]["command"],
              json({"python3", "train.py"}));
  }
}

TEST(K8sKinds, ResourcesShmCheckpointAndMetrics) {
  JobDescription d = ParseJobDescription(PsJob());
  json mx = Render(d, Kind::kMXJob, "x").back();
  const json& worker = mx["spec"]["mxReplicaSpecs"]["Worker"]["template"];
  const json& c = worker["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["limits"],
            json({{"cpu", "4"}, {"memory", "8Gi"}, {"nvidia.com/gpu", "1"}}));
  const json& server = mx["spec"]["mxReplicaSpecs"]["Server"]["template"]["spec"]["containers"][0];
  EXPECT_FALSE(server["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_EQ(worker["metadata"]["annotations"]["prometheus.io/port"], "9100");
  EXPECT_EQ(EnvOf(c)["TANDEM_METRICS_PORT"], "9100");
  EXPECT_EQ(EnvOf(c)["TANDEM_METRICS_ADDRESS"], "0.0.0.0");  // Prometheus scrapes the pod IP
  const json& volumes = worker["spec"]["volumes"];
  ASSERT_EQ(volumes.size(), 2u);
  EXPECT_EQ(volumes[0]["emptyDir"], json({{"medium", "Memory"}, {"sizeLimit", "1Gi"}}));
  EXPECT_EQ(volumes[1]["persistentVolumeClaim"]["claimName"], "ckpt");
  EXPECT_EQ(c["volumeMounts"][0]["mountPath"], "/dev/shm");
  EXPECT_EQ(c["volumeMounts"][1]["mountPath"], "/checkpoints");
}

// (kind): the servers and the scheduler on the CPU pool, the workers on the
// GPU pool, through every kind that runs a parameter server.
class K8sNodeSelector : public ::testing::TestWithParam<Kind> {};

TEST_P(K8sNodeSelector, ServersOnCpuNodesWorkersOnGpuNodes) {
  json doc = PsJob();
  doc["node_selector"] = {{"pool", "gpu"}};
  doc["server_node_selector"] = {{"pool", "cpu"}, {"zone", "a"}};
  int seen = 0;
  for (const auto& o : Render(ParseJobDescription(doc), GetParam(), "x")) {
    std::vector<json> templates;
    std::function<void(const json&)> walk = [&](const json& node) {
      if (node.is_object()) {
        if (node.contains("spec") && node["spec"].is_object() &&
            node["spec"].contains("containers")) {
          templates.push_back(node);
          return;
        }
        for (const auto& [key, value] : node.items()) walk(value);
      } else if (node.is_array()) {
        for (const auto& v : node) walk(v);
      }
    };
    walk(o);
    for (const json& t : templates) {
      const std::string role = t["metadata"]["labels"]["tandem.io/role"];
      const json want =
          role == "worker" ? json({{"pool", "gpu"}}) : json({{"pool", "cpu"}, {"zone", "a"}});
      EXPECT_EQ(t["spec"]["nodeSelector"], want) << role;
      ++seen;
    }
  }
  EXPECT_GE(seen, 3);  // scheduler, server, worker
}

INSTANTIATE_TEST_SUITE_P(ParameterServerKinds, K8sNodeSelector,
                         ::testing::Values(Kind::kMXJob, Kind::kIndexedJob, Kind::kJobSet,
                                           Kind::kVolcanoJob, Kind::kTFJob));

TEST(K8sKinds, NoNodeSelectorUnlessGiven) {
  for (const auto& o : Render(ParseJobDescription(PsJob()), Kind::kMXJob, "x")) {
    EXPECT_EQ(o.dump().find("nodeSelector"), std::string::npos);
  }
}

TEST(K8sKinds, NoShmWhenSizeIsEmpty) {
  json doc = CollectivesJob();
  doc["shm_size"] = "";
  json job = Render(ParseJobDescription(doc), Kind::kPyTorchJob, "x").back();
  const json& spec = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"];
  EXPECT_FALSE(spec.contains("volumes"));
  EXPECT_FALSE(spec["containers"][0].contains("volumeMounts"));
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 3);
}

struct RestartCase {
  const char* policy;
  const char* kubeflow;
  const char* pod;      // a batch Job's pod restartPolicy
  int job_backoff;      // a plain Indexed Job's backoffLimit (backoff_limit is 5)
  int jobset_restarts;  // JobSet failurePolicy.maxRestarts
  bool failure_policy;  // podFailurePolicy present
};

class K8sRestart : public ::testing::TestWithParam<RestartCase> {};

TEST_P(K8sRestart, MapsOntoEveryController) {
  const RestartCase& c = GetParam();
  json doc = CollectivesJob();
  doc["restart_policy"] = c.policy;
  doc["backoff_limit"] = 5;
  JobDescription d = ParseJobDescription(doc);
  json pt = Render(d, Kind::kPyTorchJob, "x").back();
  EXPECT_EQ(pt["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"], c.kubeflow);
  EXPECT_EQ(pt["spec"]["runPolicy"]["backoffLimit"], 5);
  json job = Render(d, Kind::kIndexedJob, "x").back();
  EXPECT_EQ(job["spec"]["template"]["spec"]["restartPolicy"], c.pod);
  EXPECT_EQ(job["spec"]["backoffLimit"], c.job_backoff);
  EXPECT_EQ(job["spec"].contains("podFailurePolicy"), c.failure_policy);
  json jobset = Render(d, Kind::kJobSet, "x").back();
  EXPECT_EQ(jobset["spec"]["failurePolicy"]["maxRestarts"], c.jobset_restarts);
}

INSTANTIATE_TEST_SUITE_P(Policies, K8sRestart,
                         ::testing::Values(RestartCase{"ExitCode", "ExitCode", "Never", 5, 5, true},
                                           RestartCase{"OnFailure", "OnFailure", "OnFailure", 5, 0,
                                                       false},
                                           RestartCase{"Never", "Never", "Never", 0, 0, false}),
                         [](const auto& test) { return std::string(test.param.policy); });

TEST(K8sStream, EveryObjectFollowsASeparator) {
  std::vector<json> objects = {json{{"kind", "A"}}, json{{"kind", "B"}}};
  EXPECT_EQ(ToYamlStream(objects), "---\nkind: \"A\"\n---\nkind: \"B\"\n");
}

TEST(K8sStream, BlockYaml) {
  json v = json::parse(R"({
    "metadata": {"labels": {"tandem.io/job": "a b", "on": "x"}, "empty": {}},
    "spec": {"containers": [{"name": "c", "args": ["-x", "say \"hi\"\n"], "ports": []}],
             "rules": [{"values": [1, 2], "ok": true}], "n": null, "nested": [[1], []]}})");
  EXPECT_EQ(ToYaml(v),
            "metadata:\n"
            "  empty: {}\n"
            "  labels:\n"
            "    \"on\": \"x\"\n"
            "    tandem.io/job: \"a b\"\n"
            "spec:\n"
            "  containers:\n"
            "  - args:\n"
            "    - \"-x\"\n"
            "    - \"say \\\"hi\\\"\\n\"\n"
            "    name: \"c\"\n"
            "    ports: []\n"
            "  \"n\": null\n"
            "  nested:\n"
            "  - - 1\n"
            "  - []\n"
            "  rules:\n"
            "  - ok: true\n"
            "    values:\n"
            "    - 1\n"
            "    - 2\n");
}

// ---- several processes per node (tandem spawn-local) ------------------------------

// kind, processes per node
using SpawnCase = std::tuple<Kind, int>;

class K8sProcessesPerNode : public ::testing::TestWithParam<SpawnCase> {};

TEST_P(K8sProcessesPerNode, CountAndCommandBehindSpawnLocal) {
  const Kind kind = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  json doc = CollectivesJob();
  doc["processes_per_node"] = n;
  JobDescription d = ParseJobDescription(doc);
  EXPECT_EQ(d.processes_per_node, n);
  std::vector<json> objects = Render(d, kind, "s3cret");
  std::vector<json> containers;
  std::optional<json> count;
  for (const auto& o : objects) {
    CollectContainers(o, &containers);
    if (o["kind"] == "TrainJob") count = o["spec"]["trainer"]["numProcPerNode"];
    if (o["kind"] == "PyTorchJob") count = o["spec"]["nprocPerNode"];
  }
  ASSERT_TRUE(count.has_value());
  if (kind == Kind::kTrainJob) {
    EXPECT_EQ(*count, n);
  } else {
    EXPECT_EQ(*count, std::to_string(n));
  }
  const json want =
      n > 1 ? json::array({"tandem", "spawn-local", "--", "./train"}) : json::array({"./train"});
  ASSERT_FALSE(containers.empty());
  for (const auto& c : containers) EXPECT_EQ(c["command"], want) << c.dump();
}

INSTANTIATE_TEST_SUITE_P(Kinds, K8sProcessesPerNode,
                         ::testing::Combine(::testing::Values(Kind::kTrainJob, Kind::kPyTorchJob),
                                            ::testing::Values(1, 2, 8)));

class K8sOneProcessPerPod : public ::testing::TestWithParam<Kind> {};

TEST_P(K8sOneProcessPerPod, RefusesSeveralProcessesPerNode) {
  json doc = CollectivesJob();
  doc["processes_per_node"] = 2;
  JobDescription d = ParseJobDescription(doc);
  EXPECT_THAT([&] { Render(d, GetParam(), "s"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr(
                  "processes_per_node=2 needs kind trainjob or pytorchjob (whose pods start their "
                  "processes with `tandem spawn-local`); kind " +
                  std::string(KindName(GetParam())))));
}

INSTANTIATE_TEST_SUITE_P(Kinds, K8sOneProcessPerPod,
                         ::testing::Values(Kind::kMPIJob, Kind::kTFJob, Kind::kJobSet,
                                           Kind::kIndexedJob, Kind::kVolcanoJob, Kind::kMXJob));

// ---- elastic jobs: a PyTorchJob's elasticPolicy ------------------------------------

json ElasticJob() {
  json doc = CollectivesJob();
  doc["min_workers"] = 2;
  doc["backoff_limit"] = 7;
  return doc;
}

// The value of the container's variable `name`; "" when absent.
std::string EnvValue(const json& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"].get<std::string>() : "(from)";
  }
  return "";
}

TEST(K8sElastic, PyTorchJobHasAnElasticPolicyAndASchedulerMaster) {
  JobDescription d = ParseJobDescription(ElasticJob());
  EXPECT_TRUE(d.Elastic());
  EXPECT_EQ(d.TotalPods(), 5);
  json job = Render(d, Kind::kPyTorchJob, "x").back();
  EXPECT_EQ(job["spec"]["elasticPolicy"],
            json::parse(R"({"minReplicas": 2, "maxReplicas": 4, "maxRestarts": 7})"));
  const json& replicas = job["spec"]["pytorchReplicaSpecs"];
  EXPECT_EQ(replicas["Master"]["replicas"], 1);
  EXPECT_EQ(replicas["Worker"]["replicas"], 4);
  const json& master = replicas["Master"]["template"]["spec"]["containers"][0];
  const json& worker = replicas["Worker"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(master["command"], json::parse(R"(["tandem", "scheduler"])"));
  EXPECT_EQ(worker["command"], json::parse(R"(["./train"])"));
  for (const json* c : {&master, &worker}) {
    EXPECT_EQ((*c)["name"], "pytorch");
    EXPECT_EQ((*c)["ports"][0]["name"], "pytorchjob-port");  // the operator reads the Worker's too
    EXPECT_EQ((*c)["ports"][0]["containerPort"], 29500);
    EXPECT_EQ(EnvValue(*c, "TANDEM_MIN_WORKERS"), "2");
    EXPECT_EQ(EnvValue(*c, "DMLC_PS_ROOT_URI"), "resnet-master-0");
    EXPECT_EQ(EnvValue(*c, "DMLC_PS_ROOT_PORT"), "29500");
    EXPECT_EQ(EnvValue(*c, "DMLC_NUM_WORKER"), "4");
    EXPECT_EQ(EnvValue(*c, "DMLC_NUM_SERVER"), "0");
    EXPECT_EQ(EnvValue(*c, "DMLC_NODE_HOST"), "(from)");
  }
  EXPECT_EQ(EnvValue(master, "DMLC_ROLE"), "scheduler");
  EXPECT_EQ(EnvValue(worker, "DMLC_ROLE"), "worker");
  EXPECT_EQ(replicas["Master"]["template"]["metadata"]["labels"]["tandem.io/role"], "scheduler");
  EXPECT_EQ(replicas["Worker"]["template"]["metadata"]["labels"]["tandem.io/role"], "worker");
}

TEST(K8sElastic, MinWorkersEqualToWorkersIsNotElastic) {
  json doc = CollectivesJob();
  doc["min_workers"] = 4;
  json job = Render(ParseJobDescription(doc), Kind::kPyTorchJob, "x").back();
  EXPECT_FALSE(job["spec"].contains("elasticPolicy"));
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 3);
  EXPECT_EQ(
      EnvValue(job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0],
               "TANDEM_MIN_WORKERS"),
      "");
}

class K8sElasticRefused : public ::testing::TestWithParam<Kind> {};

TEST_P(K8sElasticRefused, OtherKindsNameThePyTorchJob) {
  json doc = ElasticJob();
  if (GetParam() == Kind::kMXJob) {
    doc["strategy"] = "parameter-server";
    doc["servers"] = 1;
  }
  JobDescription d = ParseJobDescription(doc);
  EXPECT_THAT([&] { Render(d, GetParam(), "s"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr(
                  "min_workers=2 (below workers=4) needs kind pytorchjob, the one controller with "
                  "an elastic policy (elasticPolicy); kind " +
                  std::string(KindName(GetParam())))));
}

INSTANTIATE_TEST_SUITE_P(Kinds, K8sElasticRefused,
                         ::testing::Values(Kind::kMXJob, Kind::kMPIJob, Kind::kTFJob,
                                           Kind::kTrainJob, Kind::kJobSet, Kind::kIndexedJob,
                                           Kind::kVolcanoJob));

struct ElasticBadCase {
  const char* name;
  const char* patch;
  const char* message;
};

class K8sElasticBad : public ::testing::TestWithParam<ElasticBadCase> {};

TEST_P(K8sElasticBad, SaysWhatTheElasticJobNeeds) {
  json doc = ElasticJob();
  doc.merge_patch(json::parse(GetParam().patch));
  JobDescription d = ParseJobDescription(doc);
  EXPECT_THAT([&] { Render(d, Kind::kPyTorchJob, "s"); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, K8sElasticBad,
    ::testing::Values(
        ElasticBadCase{"Never", R"({"restart_policy": "Never"})",
                       "min_workers=2 needs restart_policy 'ExitCode' or 'OnFailure'"},
        ElasticBadCase{"SeveralProcesses", R"({"processes_per_node": 2})",
                       "min_workers=2 needs processes_per_node=1 (an elastic job's workers are "
                       "pods, each joining the job on its own), got processes_per_node=2"}),
    [](const auto& test) { return std::string(test.param.name); });

// ---- the TrainJob's runtime: namespaced unless asked ------------------------------

struct RuntimeCase {
  std::string name;
  std::optional<bool> cluster_runtime;  ///< the description's field; nullopt: absent
  std::string namespace_;               ///< the description's namespace
  std::string kind;                     ///< the runtime's kind rendered
  bool has_namespace;                   ///< whether the runtime's metadata names one
};

class K8sTrainJobRuntime : public ::testing::TestWithParam<RuntimeCase> {};

TEST_P(K8sTrainJobRuntime, ScopeFollowsTheDescription) {
  const RuntimeCase& c = GetParam();
  json doc = CollectivesJob();
  doc["namespace"] = c.namespace_;
  if (c.cluster_runtime) doc["cluster_runtime"] = *c.cluster_runtime;
  JobDescription d = ParseJobDescription(doc);
  EXPECT_EQ(d.cluster_runtime, c.kind == "ClusterTrainingRuntime");
  std::vector<json> objects = Render(d, Kind::kTrainJob, "s");
  ASSERT_EQ(objects.size(), 3u);  // Secret, runtime, TrainJob
  const json& runtime = objects[1];
  const json& trainjob = objects[2];
  EXPECT_EQ(runtime["kind"], c.kind);
  EXPECT_EQ(runtime["apiVersion"], "trainer.kubeflow.org/v1alpha1");
  EXPECT_EQ(runtime["metadata"]["name"], "tandem-resnet");
  EXPECT_EQ(runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"], "torch");
  EXPECT_EQ(runtime["metadata"]["labels"]["tandem.io/job"], "resnet");
  if (c.has_namespace) {
    EXPECT_EQ(runtime["metadata"]["namespace"], c.namespace_);
  } else {
    EXPECT_FALSE(runtime["metadata"].contains("namespace")) << runtime["metadata"].dump();
  }
  EXPECT_EQ(trainjob["kind"], "TrainJob");
  EXPECT_EQ(trainjob["metadata"]["namespace"], c.namespace_);
  EXPECT_EQ(
      trainjob["spec"]["runtimeRef"],
      json({{"apiGroup", "trainer.kubeflow.org"}, {"kind", c.kind}, {"name", "tandem-resnet"}}));
}

INSTANTIATE_TEST_SUITE_P(
    Scopes, K8sTrainJobRuntime,
    ::testing::Values(
        RuntimeCase{"absent", std::nullopt, "default", "TrainingRuntime", true},
        RuntimeCase{"absent_other_namespace", std::nullopt, "ml", "TrainingRuntime", true},
        RuntimeCase{"false", false, "ml", "TrainingRuntime", true},
        RuntimeCase{"true", true, "default", "ClusterTrainingRuntime", false},
        RuntimeCase{"true_other_namespace", true, "ml", "ClusterTrainingRuntime", false}),
    [](const auto& test) { return test.param.name; });

class K8sNoTrainingRuntime : public ::testing::TestWithParam<std::tuple<Kind, bool>> {};

TEST_P(K8sNoTrainingRuntime, RefusesClusterRuntime) {
  const Kind kind = std::get<0>(GetParam());
  json doc = std::get<1>(GetParam()) ? PsJob() : CollectivesJob();
  doc["cluster_runtime"] = true;
  JobDescription d = ParseJobDescription(doc);
  EXPECT_THAT([&] { Render(d, kind, "s"); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("cluster_runtime=true needs kind trainjob (a ClusterTrainingRuntime "
                            "is a Kubeflow Trainer runtime); kind " +
                            std::string(KindName(kind)) + " has none")));
}

INSTANTIATE_TEST_SUITE_P(Kinds, K8sNoTrainingRuntime,
                         ::testing::Combine(::testing::Values(Kind::kMXJob, Kind::kPyTorchJob,
                                                              Kind::kMPIJob, Kind::kTFJob,
                                                              Kind::kJobSet, Kind::kIndexedJob,
                                                              Kind::kVolcanoJob),
                                            ::testing::Bool()));

TEST(K8sJobDescription, ClusterRuntimeMustBeABool) {
  json doc = CollectivesJob();
  doc["cluster_runtime"] = "yes";
  EXPECT_EQ(ParseError(doc), "cluster_runtime must be true or false, got \"yes\" (string)");
}

}  // namespace
}  // namespace tandem::k8s
