package launcher

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/podmpi/podmpi/agent/sshclient/sshtest"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/jobkey"
)

// TestLauncherProvesItsRequests: the launcher's requests to worker-agents
// carry a proof that a worker holding the same job key accepts, and that a
// worker of another job does not; without a job key they carry none.
func TestLauncherProvesItsRequests(t *testing.T) {
	t.Parallel()
	job := sshtest.NewTrainerKey(t)
	dir := sshtest.WriteAuthDir(t, job)
	_, derived, err := jobkey.LoadJobKey(filepath.Join(dir, jobkey.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	other := sshtest.NewTrainerKey(t)
	_, otherDerived, err := jobkey.LoadJobKey(filepath.Join(sshtest.WriteAuthDir(t, other), jobkey.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	var proven, provenElsewhere bool
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _, proven = api.CheckProof(r, jobkey.RequestKey(derived))
		_, _, provenElsewhere = api.CheckProof(r, jobkey.RequestKey(otherDerived))
	}))
	defer srv.Close()

	get := func(cfg Config) {
		t.Helper()
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: l.proveRequests(http.DefaultTransport)}
		resp, err := c.Get(srv.URL + api.EventsPath + "?after=0")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get(Config{AuthDir: dir})
	if !proven || provenElsewhere {
		t.Errorf("proven for its job %v, for another job %v; want true, false", proven, provenElsewhere)
	}
	get(Config{AuthDir: filepath.Join(t.TempDir(), "none")})
	if proven {
		t.Error("a launcher without the job key proved its request")
	}
}
