package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Client returns a clientset for the admin kubeconfig.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.L.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}

// Kubectl runs the cluster's kubectl as admin, with stdin if given.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.L.Kubectl(c.Pins), append([]string{"--kubeconfig", c.L.AdminKubeconfig()}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// waitReady waits until the node is Ready and the default namespace has
// its default ServiceAccount: until then the API server refuses every pod
// in it ("serviceaccount "default" not found"), so a cluster is not usable
// before.
func (c *Cluster) waitReady(ctx context.Context, d time.Duration) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	last := "node not registered yet"
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, cond := range n.Status.Conditions {
				if cond.Type != corev1.NodeReady {
					continue
				}
				last = fmt.Sprintf("Ready=%s: %s", cond.Status, cond.Message)
				if cond.Status != corev1.ConditionTrue {
					break
				}
				_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
				if err == nil {
					return nil
				}
				last = "node Ready; no ServiceAccount default/default yet (kube-controller-manager makes it): " + err.Error()
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not usable after %s: %s; logs: %s, %s", d, last,
				filepathJoin(c.L.Logs(), "kubelet.log"), filepathJoin(c.L.Logs(), "kube-controller-manager.log"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// nodeHealthy fails when the node, now that everything is imported, takes
// no pods (a disk-pressure taint after the images filled the disk, say).
func (c *Cluster) nodeHealthy(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return NodeHealthError(n, c.L)
}

func filepathJoin(a, b string) string { return strings.TrimRight(a, "/") + "/" + b }

// serviceAccountKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount through a token the API server issues (TokenRequest), so
// an out-of-cluster controller runs with exactly the RBAC its release
// grants its ServiceAccount.
func (c *Cluster) serviceAccountKubeconfig(ctx context.Context, file, ns, sa string) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	exp := int64(30 * 24 * 3600)
	var tok *authv1.TokenRequest
	deadline := time.Now().Add(30 * time.Second)
	for {
		tok, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
			&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err == nil || time.Now().After(deadline) || !apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, sa, err)
	}
	// Beside it, what a pod of that ServiceAccount has mounted at
	// /var/run/secrets/kubernetes.io/serviceaccount (ServiceAccountDir):
	// Trainer's status server reads its issuer there.
	sad := filepath.Join(filepath.Dir(file), ServiceAccountDir)
	if err := os.MkdirAll(sad, 0o755); err != nil {
		return err
	}
	ca, err := os.ReadFile(c.pki.CAFile())
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": ca, "namespace": []byte(ns)} {
		if err := writeFileAtomic(filepath.Join(sad, name), data, 0o600); err != nil {
			return err
		}
	}
	return c.pki.Kubeconfig(file, APIServerURL(), "system:serviceaccount:"+ns+":"+sa, "", tok.Status.Token)
}

// ServiceAccountDir is the folder, beside a controller's kubeconfig, with
// the token, CA and namespace a pod of its ServiceAccount would have, laid
// out under secretsDir as under a pod's /var/run/secrets.
const ServiceAccountDir = secretsDir + "/kubernetes.io/serviceaccount"

// secretsDir, beside a controller's kubeconfig, is bound on
// podSecretsDir in the controller's own mount namespace. Binding the
// folder above kubernetes.io leaves the host without
// /var/run/secrets/kubernetes.io, which the Kubeflow SDK takes as proof
// that it runs in a pod (it would then ignore the kubeconfig).
const secretsDir = "secrets"

// podSecretsDir and podServiceAccountDir are where a pod has them.
const (
	podSecretsDir        = "/var/run/secrets"
	podServiceAccountDir = podSecretsDir + "/kubernetes.io/serviceaccount"
)

// decodeObjects splits a YAML stream into objects.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// encodeObjects joins objects into a YAML stream.
func encodeObjects(objs []*unstructured.Unstructured) ([]byte, error) {
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// applyObjects applies objects with server-side apply: CRDs first, waiting
// until each is established, then the rest.
func (c *Cluster) applyObjects(ctx context.Context, objs []*unstructured.Unstructured, manager string) error {
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	if len(crds) > 0 {
		b, err := encodeObjects(crds)
		if err != nil {
			return err
		}
		if _, err := c.Kubectl(ctx, b, "apply", "--server-side", "--force-conflicts", "--field-manager", manager, "-f", "-"); err != nil {
			return err
		}
		for _, o := range crds {
			if err := c.waitEstablished(ctx, o.GetName()); err != nil {
				return err
			}
		}
	}
	if len(rest) > 0 {
		b, err := encodeObjects(rest)
		if err != nil {
			return err
		}
		if _, err := c.Kubectl(ctx, b, "apply", "--server-side", "--force-conflicts", "--field-manager", manager, "-f", "-"); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data to file through a temporary file and a rename.
func writeFileAtomic(file string, data []byte, mode os.FileMode) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitEstablished waits until a CRD's Established condition is True.
func (c *Cluster) waitEstablished(ctx context.Context, name string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.L.AdminKubeconfig())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		o, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, x := range conds {
				if m, ok := x.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not Established after 60 s (last error: %v)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
