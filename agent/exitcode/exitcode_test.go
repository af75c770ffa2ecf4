package exitcode

import "testing"

func TestTableIsUniqueAndComplete(t *testing.T) {
	seen := map[Code]string{}
	for _, e := range Table {
		if prev, ok := seen[e.Code]; ok {
			t.Errorf("code %d used by %q and %q", e.Code, prev, e.Name)
		}
		seen[e.Code] = e.Name
		if e.Meaning == "" || e.Fix == "" || e.Name == "" {
			t.Errorf("code %d is not fully documented: %+v", e.Code, e)
		}
	}
	for _, c := range []Code{OK, Usage, Config, DiscoveryTimeout, ProbeFailed, MPIRunNotFound, MPIRunTimeout, Listen, Internal, SlotsUnknown, LaunchFailed, WorkerGone, ImageUnsupported, RemoteShell, CommandNotFound} {
		if _, ok := seen[c]; !ok {
			t.Errorf("code %d missing from Table", c)
		}
	}
}
