package launcher

import (
	"net/http"
	"os"

	"github.com/podmpi/podmpi/agent/launcherid"
	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/agent/worker/api"
	"github.com/podmpi/podmpi/jobkey"
)

// proveRequests returns base proving each request it carries as the job's
// launcher (api.ProofHeader, under the request key the job's id_rsa
// derives), so that worker-agents serve the launcher's /events from a
// budget strangers cannot hold. Without a request key (no id_rsa, an
// ed25519 job key, FIPS 140 mode) it returns base: the requests then share
// the agents' budget with everyone else, as before.
func (l *Launcher) proveRequests(base http.RoundTripper) http.RoundTripper {
	cfg, err := sshclient.LoadJobConfig(l.cfg.AuthDir, os.Getenv("HOME"), "")
	var key []byte
	if err == nil {
		key = jobkey.RequestKey(cfg.Derived)
	}
	// The instance names the proofs' counter; a launcher that does not
	// declare itself (instance.go) still proves its requests.
	id := l.instance.ID
	if id == "" {
		id = launcherid.New("", "", l.start).ID
	}
	p := api.NewProver(key, id)
	if p == nil {
		l.log.Debug("the launcher's requests to worker-agents carry no proof: no request key derives from the job key "+
			"(no id_rsa, an ed25519 job key, or FIPS 140 mode); they share the agents' budget with every other client", "err", err)
		return base
	}
	return api.ProvingTransport{Base: base, Prover: p}
}
