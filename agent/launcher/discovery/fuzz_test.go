package discovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/hostfile"
)

// FuzzParseWorkers: the --workers parser never panics, and what it accepts is
// a valid, duplicate-free host list with counts in range.
func FuzzParseWorkers(f *testing.F) {
	for _, s := range []string{
		"tj-node-0-0.tj=2, tj-node-0-1.tj", "a=0", "a=x", "a:2", "a.tj,A.tj.", "fd00::1", "010.1.1.1",
		"10.0.0.1=3", "a==2", "=2", ",,,", "a=2=3", "a = 4", "a_b", "a=99999999999999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		plan, err := Resolve(Spec{Workers: []string{s}})
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || se.Error() == "" {
				t.Fatalf("error %v is not a *SpecError", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, h := range plan.Hosts {
			if verr := hostfile.ValidateName(h.Name); verr != nil {
				t.Fatalf("accepted invalid name %q: %v", h.Name, verr)
			}
			if h.Slots < 0 || h.Slots > hostfile.MaxSlots {
				t.Fatalf("accepted slots %d", h.Slots)
			}
			if seen[nameKey(h.Name)] {
				t.Fatalf("accepted duplicate %q", h.Name)
			}
			seen[nameKey(h.Name)] = true
		}
	})
}

// FuzzExpandTemplate: templates never panic; accepted ones give n distinct
// valid names without braces.
func FuzzExpandTemplate(f *testing.F) {
	for _, s := range []string{"tj-node-0-{i}.tj", "pi-worker-{i+1}.pi.default.svc", "{i}", "{i}{i+1}", "w-{j}", "w-{i", "10.0.0.{i}", "{i}.{i}.{i}.{i}", ""} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, tmpl string, n uint8) {
		hosts, err := ExpandTemplate(tmpl, int(n))
		if err != nil {
			return
		}
		if len(hosts) != int(n) {
			t.Fatalf("%d hosts for n=%d", len(hosts), n)
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if hostfile.ValidateName(h.Name) != nil || strings.ContainsAny(h.Name, "{}") || seen[nameKey(h.Name)] {
				t.Fatalf("bad expansion %q of %q", h.Name, tmpl)
			}
			seen[nameKey(h.Name)] = true
		}
	})
}

// FuzzNaturalLess: the order used for Service hosts is a strict weak order.
func FuzzNaturalLess(f *testing.F) {
	f.Add("w-2", "w-10", "w-02")
	f.Add("10.0.0.9", "10.0.0.10", "a")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		if naturalLess(a, a) {
			t.Fatalf("%q < itself", a)
		}
		if naturalLess(a, b) && naturalLess(b, a) {
			t.Fatalf("%q and %q both less", a, b)
		}
		if naturalLess(a, b) && naturalLess(b, c) && !naturalLess(a, c) {
			t.Fatalf("not transitive: %q < %q < %q", a, b, c)
		}
	})
}
