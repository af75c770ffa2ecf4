package launcher

import "testing"

// TestDeclareInstanceOncePerContainer: the launcher that runs mpirun
// declares itself; a second one started next to it while it runs (by
// hand, with kubectl exec) does not, and the next one after it ended does.
func TestDeclareInstanceOncePerContainer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mk := func() *Launcher {
		l, err := New(Config{TempDir: dir, KubePodUID: "uid-1"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := mk()
	if !first.instance.IsZero() {
		t.Fatal("a launcher declares itself before Run")
	}
	release := first.declareInstance()
	if first.instance.IsZero() || first.instance.PodUID != "uid-1" {
		t.Fatalf("the job's launcher declares %+v", first.instance)
	}
	second := mk()
	release2 := second.declareInstance()
	if !second.instance.IsZero() {
		t.Errorf("a second launcher in the container declares itself while the first runs: %+v", second.instance)
	}
	release2()
	release()
	third := mk()
	defer third.declareInstance()()
	if third.instance.IsZero() || third.instance.ID == first.instance.ID {
		t.Errorf("the launcher after the first ended declares %+v", third.instance)
	}
}
