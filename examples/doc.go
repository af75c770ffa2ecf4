// Package examples holds podmpi's sample jobs (a TrainJob, MPIJobs, the
// MPIJob -> TrainJob migration pairs, the compose file) and the tests that
// validate them together with the install manifests of deploy/ and the Helm
// chart charts/podmpi. It has no exported API; the Go code is test-only:
//
//   - every kustomization of deploy/ and examples/ is rendered with the
//     kustomize Go API, every MPIJob Component of deploy/ is applied to the
//     sample MPIJobs, the chart is rendered by the pinned helm with several
//     sets of values, and every ClusterTrainingRuntime, TrainingRuntime,
//     TrainJob and MPIJob it yields (and every migration pair) is checked
//     against the CRD openAPIV3Schema of every Trainer and mpi-operator
//     release copied into testdata/crds, by a structural validator written
//     for the subset of OpenAPI v3 that CRDs use (types, formats, required,
//     properties, additionalProperties, x-kubernetes-preserve-unknown-fields,
//     x-kubernetes-int-or-string, enum, items, list-type map/set uniqueness,
//     length, count and minimum bounds, patterns). CEL rules
//     (x-kubernetes-validations) are not evaluated;
//   - core objects (NetworkPolicy, ...) and every pod template embedded in a
//     custom resource are decoded strictly into the k8s.io/api types, so an
//     unknown or misspelt field fails;
//   - every pod meets the restricted Pod Security Standard plus podmpi's own
//     rules (read-only root with an emptyDir on /tmp, container "node" and
//     /readyz probes for Trainer, the launcher runs "launcher --", the
//     NetworkPolicy label, no Istio sidecar, FallbackToLogsOnError, no mpirun
//     time limit, one launcher pod per Trainer runtime), brings podmpi into
//     any image (the init container or image volume "podmpi" at /opt/podmpi,
//     first on PATH) and runs as 1000:0 unless pinned to an OpenShift SCC;
//   - the namespace-wide NetworkPolicy is evaluated against the flows an MPI
//     job needs and the ones it must refuse;
//   - deploy/components/images names every image once; deploy/ builds from
//     its own files alone and keeps cluster-scoped and namespaced objects
//     apart; the chart renders what its kustomize twin does;
//   - the compose file passes "docker-compose config" (v1) or "docker
//     compose config" (v2) when one is installed.
package examples
