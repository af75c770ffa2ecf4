// Package examples holds podmpi's Kubernetes manifests (a kustomize base per
// operator, overlays for Trainer v2, mpi-operator and OpenShift, and the
// MPIJob -> TrainJob migration pairs) and the compose file, and the tests
// that validate them. It has no exported API; the Go code is test-only:
//
//   - every overlay is rendered with the kustomize Go API, and every
//     ClusterTrainingRuntime, TrainingRuntime, TrainJob and MPIJob it yields
//     (and every migration pair) is checked against the CRD openAPIV3Schema
//     of every Trainer and mpi-operator release copied into testdata/crds, by
//     a structural validator written for the subset of OpenAPI v3 that CRDs
//     use (types, formats, required, properties, additionalProperties,
//     x-kubernetes-preserve-unknown-fields, x-kubernetes-int-or-string, enum,
//     items, list-type map/set uniqueness, length, count and minimum bounds,
//     patterns). CEL rules (x-kubernetes-validations) are not evaluated;
//   - core objects (NetworkPolicy, ...) and every pod template embedded in a
//     custom resource are decoded strictly into the k8s.io/api types, so an
//     unknown or misspelt field fails;
//   - every pod meets the restricted Pod Security Standard plus podmpi's own
//     rules (read-only root with an emptyDir on /tmp, container "node" and
//     /readyz probes for Trainer, the launcher runs "launcher --", the
//     NetworkPolicy label, no Istio sidecar, FallbackToLogsOnError, no mpirun
//     time limit, one launcher pod per Trainer runtime);
//   - the namespace-wide NetworkPolicy is evaluated against the flows an MPI
//     job needs and the ones it must refuse;
//   - each overlay names every image once, in its images: list;
//   - the compose file passes "docker-compose config" (v1) or "docker
//     compose config" (v2) when one is installed.
package examples
