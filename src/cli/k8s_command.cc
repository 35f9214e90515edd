// `tandem k8s render`: renders a job description into Kubernetes manifests.
//
//   tandem k8s render -f job.json --kind KIND [--cluster-runtime] [-o FILE]
//
// docs/deploy.md describes the description's fields and each kind.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "k8s/job_description.h"
#include "k8s/render.h"
#include "launch/job_credentials.h"
#include "tandem/error.h"

namespace tandem::cli {
namespace {

struct RenderArguments {
  std::string description;
  std::string kind;
  std::string output;
  bool cluster_runtime = false;  ///< sets the description's cluster_runtime
};

int RunRender(const RenderArguments& args) {
  auto d = k8s::LoadJobDescription(args.description);
  auto kind = k8s::ParseKind(args.kind);
  if (!kind) throw InvalidArgument(fmt::format("unknown kind '{}'", args.kind));
  if (args.cluster_runtime) d.cluster_runtime = true;
  std::string secret = d.generate_secret ? launch::GenerateJobSecret() : std::string();
  std::string text = k8s::ToYamlStream(k8s::Render(d, *kind, secret));
  if (args.output.empty() || args.output == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw IoError("cannot write the manifests to standard output");
    return 0;
  }
  std::ofstream out(args.output, std::ios::trunc);
  if (out) out << text << std::flush;
  if (!out) {
    throw IoError(
        fmt::format("cannot write the manifests to {}: {}", args.output, std::strerror(errno)));
  }
  return 0;
}

}  // namespace

void RegisterK8sCommand(CLI::App& app, CommandBody* body) {
  auto* k8s = app.add_subcommand("k8s", "Kubernetes: render manifests for a job");
  k8s->require_subcommand(1);
  auto args = std::make_shared<RenderArguments>();
  auto* render = k8s->add_subcommand(
      "render",
      "Render a job description (JSON) as the manifests of one Kubernetes controller: a "
      "multi-document YAML stream (objects in JSON syntax) for `kubectl apply -f`");
  render->footer(
      "Kinds: mxjob, pytorchjob, mpijob, tfjob, trainjob, jobset, indexed-job, volcano-job.\n"
      "A generated Secret holds a fresh TANDEM_SECRET on every run; keep the file private.\n"
      "See docs/deploy.md for the description's fields and what each kind runs.");
  render->add_option("-f,--file", args->description, "The job description (JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  std::string kinds;
  for (auto kind : k8s::AllKinds())
    kinds += (kinds.empty() ? "" : ", ") + std::string(k8s::KindName(kind));
  render->add_option("-k,--kind", args->kind, "What to render: " + kinds)
      ->required()
      ->check(CLI::Validator(
          [kinds](std::string& value) -> std::string {
            if (k8s::ParseKind(value)) return {};
            return fmt::format("unknown kind '{}' (known: {})", value, kinds);
          },
          "KIND", "kind"));
  render->add_flag("--cluster-runtime", args->cluster_runtime,
                   "Kind trainjob: a cluster-scoped ClusterTrainingRuntime (needs a cluster "
                   "administrator) instead of a TrainingRuntime in the job's namespace; the "
                   "description's \"cluster_runtime\": true does the same");
  render->add_option("-o,--output", args->output,
                     "Write the manifests to this file (default: standard output)");
  render->callback([body, args] { *body = [args] { return RunRender(*args); }; });
}

}  // namespace tandem::cli
