// Package examples holds podmpi's Kubernetes manifests and the compose file,
// and the tests that validate them. It has no exported API; the Go code is
// test-only:
//
//   - every ClusterTrainingRuntime, TrainJob and MPIJob under examples/ is
//     checked against the upstream CRD's openAPIV3Schema (copied into
//     testdata/crds) by a structural validator written for the subset of
//     OpenAPI v3 that CRDs use (types, formats, required, properties,
//     additionalProperties, x-kubernetes-preserve-unknown-fields,
//     x-kubernetes-int-or-string, enum, items, list-type map/set uniqueness,
//     length, count and minimum bounds, patterns). CEL rules
//     (x-kubernetes-validations) are not evaluated;
//   - core objects (NetworkPolicy, ...) and every pod template embedded in a
//     custom resource are decoded strictly into the k8s.io/api types, so an
//     unknown or misspelt field fails;
//   - every pod meets the restricted Pod Security Standard plus podmpi's own
//     rules (read-only root with an emptyDir on /tmp, container "node" and
//     /readyz probes for Trainer, the launcher runs "launcher --");
//   - the compose file passes "docker-compose config" when docker-compose is
//     installed.
package examples
