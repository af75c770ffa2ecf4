package examples

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The launcher reads the Kubernetes API when it may: it records Events on
// the TrainJob or MPIJob and on its own pod, and reads the job's pods. It
// runs as the namespace's default ServiceAccount (a ClusterTrainingRuntime
// serves every namespace, and a pod naming a ServiceAccount that does not
// exist is refused, so no dedicated one can be named), with a token; the
// workers get none. deploy/rbac grants the verbs, per namespace; without
// it the launcher works as before.

// rbacDir is the kustomize base with the launcher's Role and RoleBinding.
const rbacDir = deployDir + "/rbac"

// launcherRBACName names both the Role and the RoleBinding.
const launcherRBACName = "podmpi-launcher"

// launcherPodEnv are the downward-API variables the launcher container
// carries, each with the field it comes from: its own pod's name and uid,
// the object its Events name and the key to the job's pods.
var launcherPodEnv = map[string]string{
	"PODMPI_KUBE_POD_NAME": "metadata.name",
	"PODMPI_KUBE_POD_UID":  "metadata.uid",
}

// checkAPIAccess: the launcher pod mounts a service-account token, runs as
// the namespace's default ServiceAccount and carries launcherPodEnv; a
// worker pod never mounts a token (anything in it could use the launcher's
// verbs otherwise).
func checkAPIAccess(p podTemplate) []string {
	var errs []string
	at := func(format string, a ...any) { errs = append(errs, p.Path+": "+fmt.Sprintf(format, a...)) }
	ps := p.Spec.Spec
	token := ps.AutomountServiceAccountToken
	switch p.Role {
	case "launcher":
		if token == nil || !*token {
			at("spec.automountServiceAccountToken %s: want true, set explicitly: the launcher records its diagnosis as Events and reads the job's pods with the token",
				boolText(token))
		}
		if ps.ServiceAccountName != "" || ps.DeprecatedServiceAccount != "" {
			at("spec.serviceAccountName %q: leave it unset (the namespace's default ServiceAccount, which deploy/rbac binds): "+
				"a pod naming a ServiceAccount its namespace lacks is refused, and a ClusterTrainingRuntime serves every namespace",
				ps.ServiceAccountName+ps.DeprecatedServiceAccount)
		}
		if len(ps.Containers) > 0 {
			c := ps.Containers[0]
			for _, name := range sortedKeys(launcherPodEnv) {
				if got := fieldRefOf(c, name); got != launcherPodEnv[name] {
					at("container %q: env %s from fieldRef %q, want %q (the downward API: the launcher's own pod)", c.Name, name, got, launcherPodEnv[name])
				}
			}
		}
	case "worker":
		if token == nil || *token {
			at("spec.automountServiceAccountToken %s: want false, set explicitly: workers need no API access, and with a token anything they run "+
				"would hold the namespace default ServiceAccount's verbs (deploy/rbac gives it the launcher's)", boolText(token))
		}
	}
	return errs
}

func boolText(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

// fieldRefOf returns the downward-API field path of env variable name in c
// ("" when it is missing or not a fieldRef).
func fieldRefOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

// launcherRules is everything the launcher's Role grants, as
// "group/resource: verbs" (core group ""). Nothing more: no watch (the
// launcher lists periodically), no update or delete, no Secrets.
var launcherRules = map[string][]string{
	"/events":                        {"create", "patch", "list"}, // Events on the TrainJob/MPIJob and on its own pod; patch aggregates repeats; list: why a worker's container restarted
	"/pods":                          {"get", "list"},             // its own pod and the job's pods: what Kubernetes knows about the workers
	"trainer.kubeflow.org/trainjobs": {"get"},                     // the TrainJob's uid, so that kubectl describe shows the Events
	"kubeflow.org/mpijobs":           {"get"},                     // the MPIJob's uid, likewise
	"jobset.x-k8s.io/jobsets":        {"get"},                     // the JobSet's owner, the TrainJob
}

// rbacProblems checks the rendered deploy/rbac: exactly a Role and a
// RoleBinding named launcherRBACName, without a namespace (kubectl apply -n
// NS puts them in NS), the Role granting exactly launcherRules, the binding
// naming the default ServiceAccount of its own namespace.
func rbacProblems(docs []document) []string {
	var errs []string
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, d := range docs {
		if md, _ := d.Obj["metadata"].(map[string]any); md["namespace"] != nil {
			errs = append(errs, fmt.Sprintf("%s: metadata.namespace %v: leave it out, so that kubectl apply -n NS -k deploy/rbac serves any namespace", d, md["namespace"]))
		}
		switch {
		case d.GVK == gvk{"rbac.authorization.k8s.io/v1", "Role"} && role == nil:
			role = new(rbacv1.Role)
			if err := strictYAML(d.Raw, role); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", d, err))
			}
		case d.GVK == gvk{"rbac.authorization.k8s.io/v1", "RoleBinding"} && binding == nil:
			binding = new(rbacv1.RoleBinding)
			if err := strictYAML(d.Raw, binding); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", d, err))
			}
		default:
			errs = append(errs, fmt.Sprintf("%s: want only one Role and one RoleBinding in %s", d, repoName(rbacDir)))
		}
	}
	if role == nil || binding == nil {
		return append(errs, fmt.Sprintf("%s: want a Role and a RoleBinding named %s", repoName(rbacDir), launcherRBACName))
	}
	if role.Name != launcherRBACName || binding.Name != launcherRBACName {
		errs = append(errs, fmt.Sprintf("Role %q, RoleBinding %q: want both named %s", role.Name, binding.Name, launcherRBACName))
	}
	errs = append(errs, roleRuleProblems(role.Rules)...)
	want := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: launcherRBACName}
	if binding.RoleRef != want {
		errs = append(errs, fmt.Sprintf("RoleBinding roleRef %+v: want %+v", binding.RoleRef, want))
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default"}
	if len(binding.Subjects) != 1 || binding.Subjects[0] != sa {
		errs = append(errs, fmt.Sprintf("RoleBinding subjects %+v: want exactly [{kind: ServiceAccount, name: default}] with no namespace "+
			"(in a RoleBinding an empty subject namespace is the binding's own, so one file serves every namespace)", binding.Subjects))
	}
	return errs
}

// roleRuleProblems compares rules with launcherRules, verb by verb.
func roleRuleProblems(rules []rbacv1.PolicyRule) []string {
	var errs []string
	got := map[string][]string{}
	for i, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			errs = append(errs, fmt.Sprintf("Role rules[%d]: no resourceNames or nonResourceURLs (the launcher's objects are named per job)", i))
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				got[key] = append(got[key], r.Verbs...)
			}
		}
	}
	for key, verbs := range got {
		sort.Strings(verbs)
		got[key] = slices.Compact(verbs)
	}
	keys := sortedKeys(launcherRules)
	for _, k := range sortedKeys(got) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		want := slices.Sorted(slices.Values(launcherRules[k]))
		if !slices.Equal(got[k], want) {
			errs = append(errs, fmt.Sprintf("Role grants %s %v, want %v", k, got[k], want))
		}
	}
	return errs
}

// TestRBACBase renders deploy/rbac as kubectl kustomize does and checks
// what it grants.
func TestRBACBase(t *testing.T) {
	docs, err := render(rbacDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rbacProblems(docs) {
		t.Error(e)
	}
}

// TestNamespaceIncludesItsParts: deploy/namespace, what each namespace
// gets, applies deploy/rbac and deploy/networkpolicy unchanged, and nothing
// else.
func TestNamespaceIncludesItsParts(t *testing.T) {
	ns, err := render(deployDir + "/namespace")
	if err != nil {
		t.Fatal(err)
	}
	got := objectsByKey(ns)
	want := map[string]string{}
	for _, part := range []string{rbacDir, deployDir + "/networkpolicy"} {
		docs, err := render(part)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range objectsByKey(docs) {
			want[k] = v
			switch g, ok := got[k]; {
			case !ok:
				t.Errorf("deploy/namespace does not apply %s: add ../%s to its resources", k, filepath.Base(part))
			case g != v:
				t.Errorf("deploy/namespace changes %s from %s", k, repoName(part))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("deploy/namespace applies %s, which neither deploy/rbac nor deploy/networkpolicy holds", k)
		}
	}
}

// TestRBACChecksReject proves rbacProblems can fail.
func TestRBACChecksReject(t *testing.T) {
	base, err := render(rbacDir)
	if err != nil {
		t.Fatal(err)
	}
	if errs := rbacProblems(base); len(errs) != 0 {
		t.Fatalf("%s is not clean: %v", repoName(rbacDir), errs)
	}
	roleIdx := slices.IndexFunc(base, func(d document) bool { return d.GVK.Kind == "Role" })
	bindIdx := slices.IndexFunc(base, func(d document) bool { return d.GVK.Kind == "RoleBinding" })
	if roleIdx < 0 || bindIdx < 0 {
		t.Fatalf("%s renders no Role or RoleBinding", repoName(rbacDir))
	}
	rules := func(o map[string]any) []any { return o["rules"].([]any) }
	for _, tc := range []struct {
		name string
		idx  int
		f    func(o map[string]any)
		want string
	}{
		{"pods watch", roleIdx, func(o map[string]any) {
			o["rules"] = append(rules(o), map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"watch"}})
		}, "/pods [get list watch], want [get list]"},
		{"secrets", roleIdx, func(o map[string]any) {
			o["rules"] = append(rules(o), map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get"}})
		}, "/secrets [get], want []"},
		{"wildcard", roleIdx, func(o map[string]any) {
			o["rules"] = []any{map[string]any{"apiGroups": []any{"*"}, "resources": []any{"*"}, "verbs": []any{"*"}}}
		}, "*/* [*], want []"},
		{"no events", roleIdx, func(o map[string]any) {
			o["rules"] = slices.DeleteFunc(slices.Clone(rules(o)), func(r any) bool { return slices.Contains(strs(dig(r, "resources")), "events") })
		}, "/events [], want [create list patch]"},
		{"resourceNames", roleIdx, func(o map[string]any) {
			rules(o)[0].(map[string]any)["resourceNames"] = []any{"x"}
		}, "no resourceNames"},
		{"namespace in metadata", roleIdx, func(o map[string]any) {
			o["metadata"].(map[string]any)["namespace"] = "team-a"
		}, "metadata.namespace team-a"},
		{"subject namespace", bindIdx, func(o map[string]any) {
			o["subjects"].([]any)[0].(map[string]any)["namespace"] = "team-a"
		}, "want exactly [{kind: ServiceAccount, name: default}]"},
		{"another service account", bindIdx, func(o map[string]any) {
			o["subjects"].([]any)[0].(map[string]any)["name"] = "podmpi"
		}, "want exactly [{kind: ServiceAccount, name: default}]"},
		{"ClusterRole", bindIdx, func(o map[string]any) {
			o["roleRef"].(map[string]any)["kind"] = "ClusterRole"
		}, "RoleBinding roleRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs := slices.Clone(base)
			docs[tc.idx] = mutate(t, docs[tc.idx], tc.f)
			errs := rbacProblems(docs)
			if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, tc.want) }) {
				t.Errorf("want a problem containing %q, got %d:\n%s", tc.want, len(errs), strings.Join(errs, "\n"))
			}
		})
	}
}
