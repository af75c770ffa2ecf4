package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/podmpi/podmpi/hostfile"
)

// DefaultHostfile is where both Kubeflow Trainer v2 and mpi-operator mount the
// hostfile ConfigMap in the launcher pod.
const DefaultHostfile = "/etc/mpi/hostfile"

// MaxExpected bounds Spec.Expected, so a typo cannot make Resolve build
// millions of names. It is far above any MPI job run over SSH.
const MaxExpected = 100000

// Spec says where the workers come from. It mirrors the launcher's flags.
type Spec struct {
	// Workers are the --workers entries, each "name" or "name=slots". An
	// entry may itself hold several comma-separated names; spaces around
	// names are ignored.
	Workers []string
	// Hostfile is the path of an existing hostfile; "" means none. The
	// launcher passes DefaultHostfile here when that file is present (see
	// PresentHostfile). A path that does not exist is an error.
	Hostfile string
	// Service is the headless Service (--discovery.service), e.g. "tj" or
	// "tj.default.svc.cluster.local", or an explicit SRV name such as
	// "_ssh._tcp.tj".
	Service string
	// Template is a name template (--discovery.template) such as
	// "tj-node-0-{i}.tj". "{i}" is replaced by 0..Expected-1 and "{i+1}" by
	// 1..Expected; no other "{" or "}" is allowed.
	Template string
	// Expected is --workers-expected: the number of names a template expands
	// to (required for Template), or the number of SRV targets / Service IPs
	// Wait waits for (0: at least one, and the same answer twice in a row).
	// It is ignored for the workers flag and the hostfile, whose lists are
	// complete by themselves.
	Expected int
	// Self is the launcher's own name, e.g. os.Hostname() ("tj-launcher-0-0")
	// or that plus the subdomain. It matches a host name exactly
	// (case-insensitively, ignoring a trailing dot) or as a leading run of
	// labels ("tj-launcher-0-0" matches "tj-launcher-0-0.tj"). "" disables
	// the match.
	Self string
}

// Source names where a Plan's hosts come from.
type Source string

// The sources, in order of precedence.
const (
	SourceWorkersFlag Source = "workers-flag"
	SourceHostfile    Source = "hostfile"
	SourceSRV         Source = "srv"
	SourceServiceA    Source = "service-a"
	SourceTemplate    Source = "template"
)

// Plan is the static result of Resolve.
type Plan struct {
	// Source is where the hosts come from. For a Service it is SourceSRV;
	// Wait falls back to the Service's A records (SourceServiceA) while no SRV
	// record exists, unless Spec.Service is itself an SRV name.
	Source Source
	// Hosts in the order MPI should use them (file order for a hostfile, flag
	// order for --workers, index order for a template). Empty for a Service.
	Hosts []hostfile.Host
	// SelfIndex is the index of the launcher's own entry in Hosts, or -1.
	SelfIndex int
	// Format is the hostfile's format when Source is SourceHostfile
	// (otherwise hostfile.OpenMPI, the zero value).
	Format hostfile.Format
	// Ignored lists lower-precedence sources that were also configured and
	// are not used; the caller should say so in its log.
	Ignored []Source
}

// ErrNoSource: the Spec names no source of workers.
var ErrNoSource = errors.New("no worker source configured")

// SpecError is a bad setting found by Resolve. The launcher maps it to its
// configuration exit code.
type SpecError struct {
	// Flag is the launcher flag at fault, e.g. "--workers".
	Flag string
	// Value is the offending value (an entry, a path, a template).
	Value string
	// Err is the cause (hostfile sentinel errors, ErrNoSource, fs errors).
	Err error
	// Hint says how to fix it.
	Hint string
}

// Error formats the error as `--workers "a=x": invalid slot count ...; hint`.
func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.Flag)
	if e.Value != "" {
		fmt.Fprintf(&b, " %q", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Hint != "" {
		b.WriteString(" (")
		b.WriteString(e.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *SpecError) Unwrap() error { return e.Err }

// PresentHostfile returns path if it names an existing regular file, "" if
// nothing exists there, and an error if it cannot tell (permission denied) or
// path is a directory. The launcher calls it with DefaultHostfile to apply
// "--hostfile defaults to /etc/mpi/hostfile when present".
func PresentHostfile(path string) (string, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("checking for a hostfile at %s: %w", path, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("hostfile %s is a directory, not a file", path)
	}
	return path, nil
}

// Resolve picks the source of workers (see the package documentation) and
// returns its hosts, validated: every name passes hostfile.ValidateName and
// appears once. For a Service the hosts are found by Wait and Plan.Hosts is
// empty. Errors are *SpecError.
func Resolve(spec Spec) (Plan, error) {
	plan := Plan{SelfIndex: -1}
	if spec.Expected < 0 || spec.Expected > MaxExpected {
		return plan, &SpecError{Flag: "--workers-expected", Value: strconv.Itoa(spec.Expected),
			Err: errors.New("out of range"), Hint: fmt.Sprintf("use 0..%d", MaxExpected)}
	}
	workers := splitWorkers(spec.Workers)
	configured := []struct {
		src Source
		set bool
	}{
		{SourceWorkersFlag, len(workers) > 0},
		{SourceHostfile, spec.Hostfile != ""},
		{SourceSRV, spec.Service != ""},
		{SourceTemplate, spec.Template != ""},
	}
	for _, c := range configured {
		if !c.set {
			continue
		}
		if plan.Source == "" {
			plan.Source = c.src
		} else {
			plan.Ignored = append(plan.Ignored, c.src)
		}
	}
	var err error
	switch plan.Source {
	case SourceWorkersFlag:
		plan.Hosts, err = parseWorkers(workers)
	case SourceHostfile:
		plan.Hosts, plan.Format, err = readHostfile(spec.Hostfile)
	case SourceSRV:
		err = validateService(spec.Service)
	case SourceTemplate:
		plan.Hosts, err = ExpandTemplate(spec.Template, spec.Expected)
	default:
		return plan, &SpecError{Flag: "discovery", Err: ErrNoSource,
			Hint: "pass --workers, --hostfile (or mount the operator's hostfile at " + DefaultHostfile +
				"), --discovery.service or --discovery.template with --workers-expected"}
	}
	if err != nil {
		return plan, err
	}
	plan.SelfIndex = FindSelf(spec.Self, plan.Hosts)
	return plan, nil
}

// splitWorkers splits comma-separated entries and drops empty ones.
func splitWorkers(entries []string) []string {
	var out []string
	for _, e := range entries {
		for _, w := range strings.Split(e, ",") {
			if w = strings.TrimSpace(w); w != "" {
				out = append(out, w)
			}
		}
	}
	return out
}

// ParseWorker parses one --workers entry, "name" or "name=slots". Slots is 0
// when the entry has no count.
func ParseWorker(entry string) (hostfile.Host, error) {
	name, count, hasCount := strings.Cut(strings.TrimSpace(entry), "=")
	name = strings.TrimSpace(name)
	if err := hostfile.ValidateName(name); err != nil {
		hint := "use a pod DNS name such as tj-node-0-1.tj, optionally with =slots"
		if strings.Contains(name, ":") {
			hint = "write slots as name=N, not name:N"
		}
		return hostfile.Host{}, &SpecError{Flag: "--workers", Value: entry, Err: err, Hint: hint}
	}
	h := hostfile.Host{Name: name}
	if hasCount {
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || n < 1 || n > hostfile.MaxSlots {
			return hostfile.Host{}, &SpecError{Flag: "--workers", Value: entry,
				Err:  fmt.Errorf("%w %q", hostfile.ErrInvalidSlots, count),
				Hint: fmt.Sprintf("slots must be an integer in 1..%d", hostfile.MaxSlots)}
		}
		h.Slots = n
	}
	return h, nil
}

func parseWorkers(entries []string) ([]hostfile.Host, error) {
	hosts := make([]hostfile.Host, 0, len(entries))
	seen := make(map[string]string, len(entries))
	for _, e := range entries {
		h, err := ParseWorker(e)
		if err != nil {
			return nil, err
		}
		k := nameKey(h.Name)
		if prev, dup := seen[k]; dup {
			return nil, &SpecError{Flag: "--workers", Value: e,
				Err:  fmt.Errorf("%w: %q is already listed as %q", hostfile.ErrDuplicateHost, h.Name, prev),
				Hint: "list each worker once; give its process count as name=slots"}
		}
		seen[k] = h.Name
		hosts = append(hosts, h)
	}
	return hosts, nil
}

func readHostfile(path string) ([]hostfile.Host, hostfile.Format, error) {
	hosts, f, err := hostfile.ParseFile(path)
	if err == nil {
		return hosts, f, nil
	}
	// The *hostfile.ParseError already names the file and line.
	hint := ""
	switch {
	case errors.Is(err, fs.ErrNotExist):
		hint = "check the pod's volume mounts, or drop --hostfile"
	case errors.Is(err, fs.ErrPermission):
		hint = "the launcher cannot read the file: check the volume's defaultMode and the pod's runAsUser/fsGroup"
	case errors.Is(err, hostfile.ErrNoHosts):
		hint = "the hostfile lists no host: check the job's worker count"
	}
	return nil, 0, &SpecError{Flag: "--hostfile", Err: err, Hint: hint}
}

// validateService checks a --discovery.service value: a DNS name, or an SRV
// name "_service._proto.name".
func validateService(svc string) error {
	name := svc
	if srv, ok := explicitSRV(svc); ok {
		name = srv
	}
	if err := hostfile.ValidateName(name); err != nil {
		return &SpecError{Flag: "--discovery.service", Value: svc, Err: err,
			Hint: "give the headless Service name (\"tj\", \"tj.default.svc.cluster.local\") or an SRV name such as _ssh._tcp.tj"}
	}
	return nil
}

// explicitSRV reports whether svc is written as an SRV name,
// "_service._proto.name", and returns the name part.
func explicitSRV(svc string) (string, bool) {
	if !strings.HasPrefix(svc, "_") {
		return "", false
	}
	parts := strings.SplitN(svc, ".", 3)
	if len(parts) != 3 || len(parts[0]) < 2 || !strings.HasPrefix(parts[1], "_") || len(parts[1]) < 2 {
		return "", false
	}
	return parts[2], true
}

// ExpandTemplate expands a name template for i in 0..n-1: "{i}" becomes i and
// "{i+1}" becomes i+1. The template must contain at least one placeholder and
// no other braces, n must be in 1..MaxExpected, and every name must pass
// hostfile.ValidateName. Errors are *SpecError.
func ExpandTemplate(tmpl string, n int) ([]hostfile.Host, error) {
	bad := func(err error, hint string) error {
		return &SpecError{Flag: "--discovery.template", Value: tmpl, Err: err, Hint: hint}
	}
	if n < 1 || n > MaxExpected {
		return nil, bad(fmt.Errorf("needs --workers-expected in 1..%d, got %d", MaxExpected, n),
			"set --workers-expected to the number of worker pods")
	}
	rest := strings.NewReplacer("{i}", "", "{i+1}", "").Replace(tmpl)
	if rest == tmpl {
		return nil, bad(errors.New("no {i} or {i+1} placeholder"),
			"e.g. tj-node-0-{i}.tj (Trainer v2) or pi-worker-{i}.pi.default.svc (mpi-operator)")
	}
	if strings.ContainsAny(rest, "{}") {
		return nil, bad(errors.New("only {i} and {i+1} placeholders are supported"),
			"e.g. tj-node-0-{i}.tj (Trainer v2) or pi-worker-{i}.pi.default.svc (mpi-operator)")
	}
	hosts := make([]hostfile.Host, 0, n)
	seen := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		name := strings.NewReplacer("{i}", strconv.Itoa(i), "{i+1}", strconv.Itoa(i+1)).Replace(tmpl)
		if err := hostfile.ValidateName(name); err != nil {
			return nil, bad(err, "the expanded names must be pod DNS names such as tj-node-0-0.tj")
		}
		k := nameKey(name)
		if seen[k] {
			return nil, bad(fmt.Errorf("%w: %q", hostfile.ErrDuplicateHost, name), "")
		}
		seen[k] = true
		hosts = append(hosts, hostfile.Host{Name: name})
	}
	return hosts, nil
}

// FindSelf returns the index of the launcher's own entry among hosts, or -1.
// An exact match (case-insensitive, trailing dot ignored) wins; otherwise the
// entry whose labels start with all of self's labels, or whose labels are a
// leading run of self's (the hostfile says "tj-launcher-0-0.tj", self is
// "tj-launcher-0-0.tj.default.svc.cluster.local"). When several entries
// match that way, the first one in the list is used.
func FindSelf(self string, hosts []hostfile.Host) int {
	s := nameKey(strings.TrimSpace(self))
	if s == "" {
		return -1
	}
	prefix := -1
	for i, h := range hosts {
		n := nameKey(h.Name)
		if n == s {
			return i
		}
		if prefix < 0 && (strings.HasPrefix(n, s+".") || strings.HasPrefix(s, n+".")) {
			prefix = i
		}
	}
	return prefix
}

// nameKey is the comparison key of a host name: lower case, no trailing dot.
func nameKey(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// jobsetPod matches the host name JobSet gives a pod (and so Trainer v2):
// <jobset>-<replicated job>-<job index>-<pod index>.
var jobsetPod = regexp.MustCompile(`^(.+)-[0-9]+-[0-9]+$`)

// Siblings returns the hosts, other than self's own entry (selfIndex, -1
// for none), that are other pods of the replicated job self belongs to by
// JobSet's naming: self "tj-launcher-0-0" and "tj-launcher-0-1.tj" are
// siblings, "tj-node-0-1.tj" is not. A name proves nothing: siblings may be
// further launcher pods (Trainer starts them when a runtime sizes the
// launcher's job above one) or the launcher's own workers (a launcher that
// is pod 0 of its workers' indexed group), so the launcher uses them only
// for a hint. Names that do not follow the pattern (mpi-operator's
// <job>-launcher) have no siblings.
func Siblings(self string, hosts []hostfile.Host, selfIndex int) []string {
	label, _, _ := strings.Cut(nameKey(strings.TrimSpace(self)), ".")
	m := jobsetPod.FindStringSubmatch(label)
	if m == nil {
		return nil
	}
	var out []string
	for i, h := range hosts {
		if i == selfIndex {
			continue
		}
		l, _, _ := strings.Cut(nameKey(h.Name), ".")
		if hm := jobsetPod.FindStringSubmatch(l); hm != nil && hm[1] == m[1] && l != label {
			out = append(out, h.Name)
		}
	}
	return out
}
