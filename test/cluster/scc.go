package cluster

import (
	"context"
	_ "embed"
	"fmt"
)

// SCCPolicy emulates OpenShift's restricted-v2 SCC admission (see the file's
// comment) for namespaces labelled SCCLabel=SCCLabelValue.
//
//go:embed scc/restricted-v2.yaml
var SCCPolicy []byte

// The label that puts a namespace under the restricted-v2 emulation, and
// OpenShift's project annotations the policies read the ranges from.
const (
	SCCLabel           = "podmpi.io/scc-emulation"
	SCCLabelValue      = "restricted-v2"
	SCCUIDRange        = "openshift.io/sa.scc.uid-range"
	SCCSupplementalGID = "openshift.io/sa.scc.supplemental-groups"
)

// EnsureSCCEmulation applies the restricted-v2 admission policies.
func (c *Cluster) EnsureSCCEmulation(ctx context.Context) error {
	objs, err := decodeObjects(SCCPolicy)
	if err != nil {
		return fmt.Errorf("scc/restricted-v2.yaml: %w", err)
	}
	if err := c.applyObjects(ctx, objs, "podmpi-cluster"); err != nil {
		return fmt.Errorf("restricted-v2 admission policies (the API server must serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy): %w", err)
	}
	return nil
}
