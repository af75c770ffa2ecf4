package environ

import (
	"slices"
	"testing"
)

func TestLookup(t *testing.T) {
	env := []string{"A=1", "B=", "A=3", "NOEQUALS", "C=x=y"}
	for name, want := range map[string]struct {
		v  string
		ok bool
	}{"A": {"3", true}, "B": {"", true}, "C": {"x=y", true}, "NOEQUALS": {"", false}, "D": {"", false}, "": {"", false}} {
		if v, ok := Lookup(env, name); v != want.v || ok != want.ok {
			t.Errorf("Lookup(%q) = %q, %t; want %q, %t", name, v, ok, want.v, want.ok)
		}
		if got := Get(env, name); got != want.v {
			t.Errorf("Get(%q) = %q", name, got)
		}
	}
}

func TestSet(t *testing.T) {
	env := []string{"A=1", "B=2", "A=3"}
	if got := Set(env, "A", "4"); !slices.Equal(got, []string{"B=2", "A=4"}) {
		t.Errorf("Set = %q", got)
	}
	if !slices.Equal(env, []string{"A=1", "B=2", "A=3"}) {
		t.Errorf("Set changed its input: %q", env)
	}
	if got := Set(nil, "X", ""); !slices.Equal(got, []string{"X="}) {
		t.Errorf("Set(nil) = %q", got)
	}
}

func TestIsName(t *testing.T) {
	for name, want := range map[string]bool{
		"PATH": true, "_x1": true, "OMPI_MCA_plm_rsh_agent": true, "": false, "1A": false, "A-B": false, "A=B": false, "é": false, "A B": false,
	} {
		if got := IsName(name); got != want {
			t.Errorf("IsName(%q) = %t", name, got)
		}
	}
}
