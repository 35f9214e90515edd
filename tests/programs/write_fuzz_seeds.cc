// Writes the seed corpora of the fuzz targets whose inputs are tandem's own
// encodings (tests/fuzz/cluster_messages_fuzz.cc, collective_messages_fuzz.cc,
// mailbox_record_fuzz.cc, negotiation_fuzz.cc,
// gradient_compression_fuzz.cc, hostfile_fuzz.cc), from the real encoders,
// so the seeds are messages a node really sends, and of the text targets
// (hostfile_fuzz.cc, job_description_fuzz.cc) from files a user writes. Run
// after a format change and commit the result:
//
//   build/bin/write_fuzz_seeds tests/fuzz/corpus
//
// Each target's input layout is described at the top of its source.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "cluster/cluster_messages.h"
#include "collective/call_description.h"
#include "collective/collective_messages.h"
#include "collective/negotiation_message.h"
#include "collective/same_host_mailbox.h"
#include "kv/compression/gradient_compression.h"

namespace {

using namespace tandem;
namespace fs = std::filesystem;

class SeedWriter {
 public:
  explicit SeedWriter(fs::path root) : root_(std::move(root)) {}

  // Writes `bytes` as <root>/<target>/<name>.
  void Write(const std::string& target, const std::string& name, const std::string& bytes) {
    const fs::path dir = root_ / target;
    fs::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", (dir / name).string()));
    ++written_;
  }
  // A seed of a target whose byte 0 picks the decoder.
  void WritePicked(const std::string& target, const std::string& name, uint8_t pick,
                   const std::string& meta) {
    Write(target, name, std::string(1, static_cast<char>(pick)) + meta);
  }
  int written() const { return written_; }

 private:
  fs::path root_;
  int written_ = 0;
};

NodeInfo Node(int id, Role role, int rank, std::string host, uint16_t port) {
  NodeInfo n;
  n.id = id;
  n.role = role;
  n.rank = rank;
  n.host = std::move(host);
  n.port = port;
  return n;
}

void ClusterSeeds(SeedWriter& w) {
  const std::string t = "cluster_messages_fuzz";
  cluster::NodeTable table;
  table.num_servers = 2;
  table.num_workers = 3;
  table.nodes = {Node(0, Role::kScheduler, 0, "127.0.0.1", 9000),
                 Node(1, Role::kServer, 0, "127.0.0.1", 41001),
                 Node(2, Role::kServer, 1, "127.0.0.2", 41002),
                 Node(3, Role::kWorker, 0, "127.0.0.1", 41003),
                 Node(4, Role::kWorker, 1, "::1", 41004),
                 Node(5, Role::kWorker, 2, "worker-2.job.svc", 41005)};
  w.WritePicked(t, "node_table_2s_3w", 0, table.Encode());
  cluster::NodeTable alone;
  alone.nodes = {Node(0, Role::kScheduler, 0, "127.0.0.1", 9000)};
  w.WritePicked(t, "node_table_scheduler_only", 0, alone.Encode());

  cluster::RegisterRequest reg;
  reg.role = Role::kServer;
  reg.requested_rank = 1;
  reg.host = "127.0.0.1";
  reg.port = 41001;
  reg.pid = 4242;
  reg.hostname = "node-a";
  w.WritePicked(t, "register_server_rank1", 1, reg.Encode());
  reg.role = Role::kWorker;
  reg.requested_rank = -1;
  reg.host = "::1";
  w.WritePicked(t, "register_worker_any_rank", 1, reg.Encode());

  cluster::BarrierRequest barrier;
  barrier.groups = 7;
  barrier.sequence = 12;
  w.WritePicked(t, "barrier_all", 2, barrier.Encode());
  barrier.flags = cluster::BarrierRequest::kFinal;
  barrier.groups = 4;
  w.WritePicked(t, "barrier_final_workers", 2, barrier.Encode());

  cluster::BarrierFailure failure;
  failure.timed_out = true;
  failure.text = "barrier 3 of group workers timed out after 5000 ms: worker 1 did not arrive";
  w.WritePicked(t, "barrier_failure_timeout", 3, failure.Encode());

  cluster::NodeLostNotice lost;
  lost.node = Node(4, Role::kWorker, 1, "127.0.0.1", 41004);
  lost.reason = "no heartbeat for 10000 ms";
  w.WritePicked(t, "node_lost_worker", 4, lost.Encode());

  w.WritePicked(t, "text_rejected", 5,
                cluster::EncodeText("rank 3 of role worker is taken by node 5"));

  cluster::JobStopRequest stop;
  stop.kind = cluster::StopKind::kInvalidArgument;
  stop.reason = "optimizer states file /ck/kv-optimizer.server0: checksum mismatch";
  w.WritePicked(t, "job_stop_invalid_argument", 6, stop.Encode());

  cluster::JobStoppedNotice stopped;
  stopped.node = Node(1, Role::kServer, 0, "127.0.0.1", 41001);
  stopped.kind = cluster::StopKind::kIoError;
  stopped.reason = "write /ck/kv-optimizer.server0.tmp: No space left on device";
  w.WritePicked(t, "job_stopped_io_error", 7, stopped.Encode());

  cluster::WorkerLeftNotice left;
  left.epoch = 2;
  left.node = Node(5, Role::kWorker, 2, "127.0.0.1", 41005);
  left.reason = "its connection closed (connection reset by peer)";
  left.remaining = {0, 1, 3};
  w.WritePicked(t, "worker_left_epoch2", 8, left.Encode());
}

void CollectiveSeeds(SeedWriter& w) {
  const std::string t = "collective_messages_fuzz";
  collective::Hello hello;
  hello.rank = 3;
  hello.connection = 1;
  hello.connections = 2;
  w.WritePicked(t, "hello_rank3_conn1of2", 0, hello.Encode());
  hello.connection = 0;
  hello.probe = {4242, 0x7ffd12345678, 0x74616e64656d1234, 7};
  w.WritePicked(t, "hello_rank3_conn0_probe", 0, hello.Encode());
  collective::MessageKey key;
  key.communicator = 2;
  key.sequence = 1000;
  key.tag = (uint64_t{5} << 32) | 17;
  key.call = 0x9e3779b97f4a7c15;
  w.WritePicked(t, "key_ring_step", 1, key.Encode());
  w.WritePicked(t, "ack_reads_you", 2,
                collective::HelloAck{{4243, 0x7ffd00001000, 99, -1}, true}.Encode());
  w.WritePicked(t, "copy_status_no", 3, collective::CopyStatus{false}.Encode());
  w.WritePicked(t, "data_ref_1mib", 4,
                collective::DataRef{key, 0x7f0000001000, uint64_t{1} << 20}.Encode());
}

void NegotiationSeeds(SeedWriter& w) {
  using collective::CycleMessage;
  using collective::RequestKind;
  using collective::TensorRequest;
  const std::string t = "negotiation_fuzz";
  CycleMessage stopping;
  stopping.stopping = true;
  stopping.clock_ms = 7;
  stopping.cache_capacity = 1024;
  w.Write(t, "stopping_empty", stopping.Encode());

  CycleMessage full;
  full.clock_ms = 123456;
  full.settings = {size_t{16} << 20, std::chrono::microseconds(2500), AllReduceAlgorithm::kRing};
  full.cache_capacity = 1024;
  TensorRequest weight;
  weight.name = "conv1.weight";
  weight.shape = {64, 3, 3, 3};
  TensorRequest table{"embed", RequestKind::kBroadcast, DType::kI64, {9, 4}};
  table.root = 2;
  full.requests = {weight, table};
  w.Write(t, "full_requests", full.Encode());

  CycleMessage cached;
  cached.clock_ms = 99;
  cached.cache_capacity = 13;
  cached.cached = {true, false, true, true, false, false, false, false, true, true};
  TensorRequest bias;
  bias.name = "fc.bias";
  bias.dtype = DType::kBF16;
  bias.shape = {17};
  bias.op = Reduction::kAvg;
  bias.prescale = 0.5;
  bias.algorithm = AllReduceAlgorithm::kHalvingDoubling;
  cached.requests = {bias};
  w.Write(t, "cached_bits", cached.Encode());
}

void MailboxSeeds(SeedWriter& w) {
  // Byte 0: how far the ring's end lies beyond the published bytes (in
  // records of 8 bytes); then one record as a peer writes it.
  const std::string t = "mailbox_record_fuzz";
  collective::MessageKey key;
  key.communicator = 1;
  key.sequence = 77;
  key.tag = (uint64_t{2} << 56) | (uint64_t{1} << 32) | 3;
  key.call = 0x0123456789abcdef;
  auto record = [&](const collective::MailboxRecord& r, uint8_t beyond) {
    std::string bytes(collective::MailboxRecordSize(r.payload.size()), '\0');
    collective::WriteMailboxRecord(reinterpret_cast<std::byte*>(bytes.data()), r);
    return std::string(1, static_cast<char>(beyond)) + bytes;
  };
  std::vector<std::byte> payload(21);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 7);
  w.Write(t, "data_21_bytes",
          record({collective::msg::kData, key, 0, 0, std::span<const std::byte>(payload)}, 2));
  w.Write(t, "data_empty", record({collective::msg::kData, key, 0, 0, {}}, 0));
  w.Write(t, "data_ref_1mib",
          record({collective::msg::kDataRef, key, 0x7f0000001000, uint64_t{1} << 20, {}}, 1));
  w.Write(t, "data_ref_done", record({collective::msg::kDataRefDone, key, 0, 0, {}}, 3));
  // Padding to the ring's end: size 16, type 0.
  std::string pad(17, '\0');
  pad[1] = 16;
  w.Write(t, "padding_16", pad);
}

void CallSeeds(SeedWriter& w) {
  // Byte 0 picks the decoder: even a call description, odd a call notice.
  const std::string t = "call_description_fuzz";
  collective::CallDescription d;
  d.kind = collective::CallKind::kAllReduce;
  d.dtype = DType::kF32;
  d.count = 10;
  d.reduction = 0;
  d.algorithm = 1;
  d.segment_bytes = 1 << 20;
  d.name = "layer3.weight";
  d.shape = {2, 5};
  w.WritePicked(t, "allreduce_named", 0, d.Encode());
  collective::CallDescription v = d;
  v.kind = collective::CallKind::kAllGather;
  v.counts = {3, 0, 7};
  v.name.clear();
  v.shape = {3};
  w.WritePicked(t, "allgatherv_counts", 2, v.Encode());
  collective::CallDescription b;
  b.kind = collective::CallKind::kBroadcast;
  b.dtype = DType::kI64;
  b.count = 4;
  b.root = 2;
  w.WritePicked(t, "broadcast_root2", 4, b.Encode());
  w.WritePicked(
      t, "notice_description", 1,
      collective::CallNotice{7, 17, collective::NoticeKind::kDescription, 17, d.Encode(), {}}
          .Encode());
  w.WritePicked(t, "notice_not_reached", 3,
                collective::CallNotice{0, 5, collective::NoticeKind::kNotReached, 4, b.Encode(), {}}
                    .Encode());
  w.WritePicked(
      t, "notice_probe_reply", 7,
      collective::CallNotice{3, 12, collective::NoticeKind::kProbeReply, 1, {}, {}}.Encode());
  w.WritePicked(
      t, "notice_abort", 5,
      collective::CallNotice{
          0, 9, collective::NoticeKind::kAbort, 0, {}, "allreduce 'x' waits for worker rank 2"}
          .Encode());
}

void CompressionSeeds(SeedWriter& w) {
  const std::string t = "gradient_compression_fuzz";
  for (auto [type, name] : {std::pair{kv::CompressionType::kOneBit, "onebit"},
                            std::pair{kv::CompressionType::kTwoBit, "twobit"}}) {
    kv::CompressionParams p;
    p.type = type;
    p.threshold = 0.5f;
    for (size_t count : {size_t{1}, size_t{16}, size_t{33}, size_t{100}}) {
      std::vector<float> grad(count), residual(count, 0.0f);
      for (size_t i = 0; i < count; ++i) grad[i] = float(int(i % 5) - 2) * 0.4f;
      std::string payload(kv::CompressedBytes(p, count), '\0');
      kv::Compress(
          p, grad, residual,
          std::span<std::byte>(reinterpret_cast<std::byte*>(payload.data()), payload.size()));
      std::string seed(1, type == kv::CompressionType::kOneBit ? '\0' : '\1');
      seed.append(reinterpret_cast<const char*>(&p.threshold), sizeof(float));
      seed.push_back(static_cast<char>(count & 0xff));
      seed.push_back(static_cast<char>(count >> 8));
      w.Write(t, fmt::format("{}_{}_values", name, count), seed + payload);
    }
  }
}

void HostfileSeeds(SeedWriter& w) {
  const std::string t = "hostfile_fuzz";
  w.Write(t, "plain", "node1\nnode2\n");
  w.Write(t, "slots_and_users", "# four hosts\nalice@node4 slots=4\nnode5 slots=2  # gpu\n\n");
  w.Write(t, "brackets_and_colons", "[fd00::5]:8\nbob@[::1]:2\nnode7:3\n127.0.0.1 slots=1\n");
}

// Job descriptions (docs/deploy.md): two valid ones, and the hostile shapes
// the reader must refuse by name: nesting past kMaxJobDescriptionDepth (64)
// and numbers beyond a double's range, each under run-fuzzers.sh's
// -max_len of 8192 bytes.
void JobDescriptionSeeds(SeedWriter& w) {
  const std::string t = "job_description_fuzz";
  const std::string head = R"({"name": "mnist", "image": "tandem:1", "command": ["./train"], )";
  auto repeated = [](const std::string& piece, int times) {
    std::string out;
    for (int i = 0; i < times; ++i) out += piece;
    return out;
  };
  w.Write(t, "valid_parameter_server", R"({
  "name": "mnist", "namespace": "training", "image": "registry.example.com/tandem:0.1.0",
  "command": ["python3", "train.py", "--epochs", "3"], "strategy": "parameter-server",
  "workers": 4, "servers": 2, "command_runs_all_roles": false, "port": 9091,
  "resources": {"cpu": "4", "memory": "8Gi", "gpus": 1},
  "server_resources": {"cpu": "2", "memory": "4Gi"}, "gpu_resource": "nvidia.com/gpu",
  "shm_size": "2Gi", "host_network": false,
  "checkpoint": {"claim": "mnist-checkpoints", "mount_path": "/checkpoints"},
  "metrics_port": 9100, "restart_policy": "ExitCode", "backoff_limit": 3,
  "secret": {"generate": true},
  "gang_scheduling": {"scheduler": "volcano", "queue": "research", "priority_class": "high"},
  "env": {"PS_VERBOSE": "1"}, "labels": {"team": "vision"}
}
)");
  w.Write(t, "valid_collectives",
          head + R"("workers": 8, "processes_per_node": 2, "restart_policy": "OnFailure",
 "secret": {"name": "tandem-secret"}, "env": {"NCCL_DEBUG": "INFO"}})");
  w.Write(t, "env_nested_arrays_2000",
          head + R"("env": {"A": )" + repeated("[", 2000) + repeated("]", 2000) + "}}");
  w.Write(t, "labels_nested_objects_500",
          head + R"("labels": )" + repeated(R"({"a": )", 500) + "1" + repeated("}", 501));
  w.Write(t, "workers_1e400", head + R"("workers": 1e400})");
  w.Write(t, "gpus_minus_1e400", head + R"("resources": {"gpus": -1e400}})");
  w.Write(t, "port_400_digits", head + R"("port": 1)" + repeated("0", 400) + "}");
  w.Write(t, "backoff_uint64_max", head + R"("backoff_limit": 18446744073709551615})");
  w.Write(t, "fraction_and_text", head + R"("workers": 2.5, "servers": "two"})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " CORPUS_DIR   (tests/fuzz/corpus)\n";
    return 2;
  }
  try {
    SeedWriter w(argv[1]);
    ClusterSeeds(w);
    CollectiveSeeds(w);
    NegotiationSeeds(w);
    MailboxSeeds(w);
    CallSeeds(w);
    CompressionSeeds(w);
    HostfileSeeds(w);
    JobDescriptionSeeds(w);
    std::cout << "wrote " << w.written() << " seeds under " << argv[1] << "\n";
  } catch (const std::exception& e) {
    std::cerr << "write_fuzz_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
