package bench

import (
	"encoding/json"
	"fmt"
	"strings"
)

// LauncherGrep are the substrings that select the launcher's JSON log
// records [ParseLauncherLog] needs.
var LauncherGrep = []string{`"phase done"`, `"init_seconds"`}

// InitPhases is one launcher run's init split by phase, in seconds, from its
// JSON log (--log.format json): every "phase done" record, and the
// "running" record's init_seconds (launcher start to the exec of the
// command).
type InitPhases struct {
	Phases map[string]float64
	Order  []string // phases in the order they finished
	Init   float64
}

// ParseLauncherLog reads the records of one run's log lines.
func ParseLauncherLog(lines []string) (InitPhases, error) {
	r := InitPhases{Phases: map[string]float64{}}
	haveInit := false
	for _, l := range lines {
		i := strings.IndexByte(l, '{')
		if i < 0 {
			continue
		}
		var rec struct {
			Msg     string   `json:"msg"`
			Phase   string   `json:"phase"`
			Seconds *float64 `json:"seconds"`
			Init    *float64 `json:"init_seconds"`
		}
		if json.Unmarshal([]byte(l[i:]), &rec) != nil {
			continue
		}
		switch {
		case rec.Msg == "phase done" && rec.Phase != "" && rec.Seconds != nil:
			if _, dup := r.Phases[rec.Phase]; !dup {
				r.Order = append(r.Order, rec.Phase)
			}
			r.Phases[rec.Phase] += *rec.Seconds
		case rec.Init != nil:
			r.Init, haveInit = *rec.Init, true
		}
	}
	if !haveInit {
		return r, fmt.Errorf("launcher log has no init_seconds record (%d lines kept)", len(lines))
	}
	return r, nil
}
