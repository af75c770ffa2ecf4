package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Environment variables that restrict the visible devices.
const (
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
)

// maxVisibleEntries bounds the number of list entries read from one
// variable; no machine has more devices than this.
const maxVisibleEntries = 1024

type tokenKind int

const (
	tokIndex     tokenKind = iota + 1 // "3"
	tokGPUUUID                        // "GPU-8f3c..." (CUDA also accepts a unique prefix)
	tokMIGUUID                        // "MIG-4b1e..."
	tokMIGLegacy                      // "MIG-GPU-<uuid>/<gi>/<ci>"
	tokMIGIndex                       // "<gpu>:<mig>" (NVIDIA_VISIBLE_DEVICES only)
)

// visToken is one entry of a visible-devices list.
type visToken struct {
	Kind     tokenKind
	Raw      string
	Index    int    // tokIndex, tokMIGIndex: GPU index
	MIGIndex int    // tokMIGIndex: MIG device index on that GPU
	UUID     string // tokGPUUUID, tokMIGUUID: the UUID; tokMIGLegacy: the parent GPU UUID
	GI, CI   int    // tokMIGLegacy
}

type visMode int

const (
	visAll     visMode = iota // unset or "all": no restriction
	visNone                   // nothing is visible
	visList                   // Tokens select devices
	visRuntime                // interpreted by the container runtime; no restriction here
)

// visSpec is a parsed CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES.
type visSpec struct {
	Name   string
	Value  string
	Set    bool
	Mode   visMode
	Tokens []visToken
	// Invalid is the first entry that is not a device name (CUDA: the list
	// ends there); empty when every entry parsed.
	Invalid string
}

// parseToken classifies one list entry. ok is false for an entry that is
// not a device name.
func parseToken(raw string, allowMIGIndex bool) (visToken, bool) {
	s := strings.TrimSpace(raw)
	t := visToken{Raw: s}
	switch {
	case s == "":
		return t, false
	case isDigits(s):
		n, err := strconv.Atoi(s)
		if err != nil || n > 1<<20 {
			return t, false
		}
		t.Kind, t.Index = tokIndex, n
		return t, true
	case hasPrefixFold(s, "MIG-GPU-"):
		// Legacy MIG name: MIG-GPU-<uuid>/<gi>/<ci>.
		parts := strings.Split(s[len("MIG-"):], "/")
		if len(parts) != 3 || len(parts[0]) <= len("GPU-") || !isDigits(parts[1]) || !isDigits(parts[2]) {
			return t, false
		}
		gi, err1 := strconv.Atoi(parts[1])
		ci, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil || gi > 1<<16 || ci > 1<<16 {
			return t, false
		}
		t.Kind, t.UUID, t.GI, t.CI = tokMIGLegacy, parts[0], gi, ci
		return t, true
	case hasPrefixFold(s, "MIG-"):
		if len(s) == len("MIG-") || !isUUIDChars(s[len("MIG-"):]) {
			return t, false
		}
		t.Kind, t.UUID = tokMIGUUID, s
		return t, true
	case hasPrefixFold(s, "GPU-"):
		if len(s) == len("GPU-") || !isUUIDChars(s[len("GPU-"):]) {
			return t, false
		}
		t.Kind, t.UUID = tokGPUUUID, s
		return t, true
	case allowMIGIndex && strings.Count(s, ":") == 1:
		g, m, _ := strings.Cut(s, ":")
		if !isDigits(g) || !isDigits(m) {
			return t, false
		}
		gi, err1 := strconv.Atoi(g)
		mi, err2 := strconv.Atoi(m)
		if err1 != nil || err2 != nil || gi > 1<<20 || mi > 1<<16 {
			return t, false
		}
		t.Kind, t.Index, t.MIGIndex = tokMIGIndex, gi, mi
		return t, true
	}
	return t, false
}

// parseCUDAVisible parses CUDA_VISIBLE_DEVICES with CUDA's rules: unset is
// all, empty is none, and the list ends at the first entry that is not an
// index or UUID ("all", "none" and "void" are such entries).
func parseCUDAVisible(value string, set bool) visSpec {
	sp := visSpec{Name: EnvCUDAVisibleDevices, Value: value, Set: set}
	if !set {
		sp.Mode = visAll
		return sp
	}
	sp.Mode = visList
	if strings.TrimSpace(value) == "" {
		sp.Mode = visNone
		return sp
	}
	for i, raw := range strings.Split(value, ",") {
		t, ok := parseToken(raw, false)
		if !ok || i >= maxVisibleEntries {
			sp.Invalid = strings.TrimSpace(raw)
			if sp.Invalid == "" {
				sp.Invalid = "(empty entry)"
			}
			break
		}
		sp.Tokens = append(sp.Tokens, t)
	}
	return sp
}

// parseNVIDIAVisible parses NVIDIA_VISIBLE_DEVICES with the NVIDIA
// container runtime's rules.
func parseNVIDIAVisible(value string, set bool) visSpec {
	sp := visSpec{Name: EnvNVIDIAVisibleDevices, Value: value, Set: set}
	v := strings.TrimSpace(value)
	switch {
	case !set || strings.EqualFold(v, "all"):
		sp.Mode = visAll
		return sp
	case v == "" || strings.EqualFold(v, "none") || strings.EqualFold(v, "void"):
		sp.Mode = visNone
		return sp
	case strings.HasPrefix(v, "/") || strings.Contains(v, "="):
		// device-list-strategy=volume-mounts placeholder, or CDI device names:
		// the runtime resolved them when it created the container.
		sp.Mode = visRuntime
		return sp
	}
	sp.Mode = visList
	for i, raw := range strings.Split(v, ",") {
		if i >= maxVisibleEntries {
			break
		}
		t, ok := parseToken(raw, true)
		if !ok {
			if sp.Invalid == "" {
				sp.Invalid = strings.TrimSpace(raw)
				if sp.Invalid == "" {
					sp.Invalid = "(empty entry)"
				}
			}
			continue // the runtime would have refused the container; ignore it
		}
		sp.Tokens = append(sp.Tokens, t)
	}
	return sp
}

// gpuInfo is a physical GPU as enumerated from NVML.
type gpuInfo struct {
	Index       int
	UUID        string
	Model       string
	MemoryBytes uint64
	MIGEnabled  bool
	MIG         []migInfo
}

// migInfo is a MIG device of a GPU.
type migInfo struct {
	Slot        int // index for nvmlDeviceGetMigDeviceHandleByIndex
	UUID        string
	Model       string
	MemoryBytes uint64
	GI, CI      int // GPU / compute instance IDs; -1 when unknown
}

// pick is one selected GPU (MIG < 0) or MIG device (MIG = position in gpuInfo.MIG).
type pick struct{ GPU, MIG int }

// selection is the outcome of applying the visibility variables.
type selection struct {
	Devices []Device
	Reason  string // why no device is left; empty when Devices is not empty
	Notes   []string
}

// selectDevices applies NVIDIA_VISIBLE_DEVICES then CUDA_VISIBLE_DEVICES to
// the enumerated GPUs and flattens MIG-enabled GPUs into their MIG devices.
func selectDevices(gpus []gpuInfo, nv, cuda visSpec) selection {
	var sel selection
	if len(gpus) == 0 {
		sel.Devices = []Device{}
		sel.Reason = "NVML reports no GPUs on this node"
		return sel
	}
	picks, reason := applyNVIDIA(gpus, nv, &sel.Notes)
	if reason == "" {
		picks, reason = applyCUDA(gpus, picks, cuda, &sel.Notes)
	}
	sel.Devices = flatten(gpus, picks, &sel.Notes)
	if len(sel.Devices) == 0 && reason == "" {
		reason = noDeviceReason(gpus, picks)
	}
	if len(sel.Devices) == 0 {
		sel.Reason = reason
	}
	return sel
}

func applyNVIDIA(gpus []gpuInfo, nv visSpec, notes *[]string) ([]pick, string) {
	all := make([]pick, len(gpus))
	for i := range gpus {
		all[i] = pick{GPU: i, MIG: -1}
	}
	switch nv.Mode {
	case visAll, visRuntime:
		return all, ""
	case visNone:
		return nil, fmt.Sprintf("%s=%q: the container runtime was asked to expose no GPUs to this container; "+
			"request GPUs for the pod (resources.limits nvidia.com/gpu) or use --slots=cpu or --slots=N", nv.Name, clip(nv.Value))
	}
	if nv.Invalid != "" {
		*notes = append(*notes, fmt.Sprintf("%s entry %q is not a GPU index, UUID or MIG name; ignored", nv.Name, clip(nv.Invalid)))
	}
	units := 0
	for _, g := range gpus {
		if g.MIGEnabled {
			units += len(g.MIG)
		} else {
			units++
		}
	}
	if units <= len(nv.Tokens) {
		// The runtime already exposed only the listed devices (and
		// renumbered them), so the list cannot be matched by index here.
		return all, ""
	}
	seen := map[pick]bool{}
	var out []pick
	add := func(p pick) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, t := range nv.Tokens {
		ps, ok := resolveToken(gpus, all, t, false)
		if !ok {
			*notes = append(*notes, fmt.Sprintf("%s entry %q matches no device NVML reports; ignored", nv.Name, clip(t.Raw)))
			continue
		}
		for _, p := range ps {
			add(p)
		}
	}
	// The runtime exposes devices in the host's order, not the list's.
	slices.SortFunc(out, func(a, b pick) int {
		if a.GPU != b.GPU {
			return a.GPU - b.GPU
		}
		return a.MIG - b.MIG
	})
	if len(out) == 0 {
		return nil, fmt.Sprintf("%s=%q matches none of the %d GPUs NVML reports; check the device list the pod was given",
			nv.Name, clip(nv.Value), len(gpus))
	}
	return out, ""
}

func applyCUDA(gpus []gpuInfo, in []pick, cuda visSpec, notes *[]string) ([]pick, string) {
	switch cuda.Mode {
	case visAll, visRuntime:
		return in, ""
	case visNone:
		return nil, fmt.Sprintf("%s is set to an empty string, which hides every GPU from CUDA; "+
			"unset it to use all GPUs, or use --slots=cpu or --slots=N", cuda.Name)
	}
	// Physical GPUs left by the previous step, in order: CUDA indices are
	// positions in this list.
	var phys []pick
	inSet := map[pick]bool{}
	for _, p := range in {
		inSet[p] = true
		if len(phys) == 0 || phys[len(phys)-1].GPU != p.GPU {
			phys = append(phys, pick{GPU: p.GPU, MIG: -1})
		}
	}
	var out []pick
	seen := map[pick]bool{}
	truncated := ""
	for _, t := range cuda.Tokens {
		ps, ok := resolveToken(gpus, phys, t, true)
		if ok {
			ps = restrict(gpus, ps, inSet)
			ok = len(ps) > 0
		}
		if ok {
			for _, p := range ps {
				if seen[p] {
					ok = false // CUDA rejects a device listed twice
				}
			}
		}
		if !ok {
			truncated = t.Raw
			break
		}
		for _, p := range ps {
			seen[p] = true
			out = append(out, p)
		}
	}
	if truncated == "" && cuda.Invalid != "" {
		truncated = cuda.Invalid
	}
	if truncated != "" {
		if len(out) == 0 {
			return nil, fmt.Sprintf("%s=%q: its first entry %q is not the index or UUID of one of the %d GPUs visible here "+
				"(CUDA stops reading the list at the first invalid or repeated entry, so CUDA sees no GPU); "+
				"fix the list or unset %s to use all GPUs", cuda.Name, clip(cuda.Value), clip(truncated), len(phys), cuda.Name)
		}
		*notes = append(*notes, fmt.Sprintf("%s entry %q is not the index or UUID of a visible GPU, or repeats one; "+
			"as CUDA does, it and the entries after it are ignored", cuda.Name, clip(truncated)))
	}
	return out, ""
}

// restrict keeps the picks allowed by the previous step: a whole GPU stays
// whole only if it was picked whole; otherwise its allowed MIG devices stay.
func restrict(gpus []gpuInfo, ps []pick, allowed map[pick]bool) []pick {
	var out []pick
	for _, p := range ps {
		switch {
		case allowed[p] || allowed[pick{GPU: p.GPU, MIG: -1}]:
			out = append(out, p)
		case p.MIG < 0:
			for m := range gpus[p.GPU].MIG {
				if q := (pick{GPU: p.GPU, MIG: m}); allowed[q] {
					out = append(out, q)
				}
			}
		}
	}
	return out
}

// resolveToken finds the devices a list entry names. phys are the physical
// GPUs an index counts over (NVML order for NVIDIA_VISIBLE_DEVICES, the
// already-visible GPUs for CUDA_VISIBLE_DEVICES). prefix allows a unique
// GPU UUID prefix, as CUDA does.
func resolveToken(gpus []gpuInfo, phys []pick, t visToken, prefix bool) ([]pick, bool) {
	switch t.Kind {
	case tokIndex:
		if t.Index < 0 || t.Index >= len(phys) {
			return nil, false
		}
		return []pick{{GPU: phys[t.Index].GPU, MIG: -1}}, true
	case tokMIGIndex:
		if t.Index < 0 || t.Index >= len(phys) {
			return nil, false
		}
		g := phys[t.Index].GPU
		for m, mi := range gpus[g].MIG {
			if mi.Slot == t.MIGIndex {
				return []pick{{GPU: g, MIG: m}}, true
			}
		}
		return nil, false
	case tokGPUUUID:
		found := -1
		for _, p := range phys {
			u := gpus[p.GPU].UUID
			if u == "" {
				continue
			}
			if strings.EqualFold(u, t.UUID) {
				return []pick{{GPU: p.GPU, MIG: -1}}, true
			}
			if prefix && hasPrefixFold(u, t.UUID) {
				if found >= 0 {
					return nil, false // ambiguous prefix
				}
				found = p.GPU
			}
		}
		if found >= 0 {
			return []pick{{GPU: found, MIG: -1}}, true
		}
		return nil, false
	case tokMIGUUID:
		for _, p := range phys {
			for m, mi := range gpus[p.GPU].MIG {
				if mi.UUID != "" && strings.EqualFold(mi.UUID, t.UUID) {
					return []pick{{GPU: p.GPU, MIG: m}}, true
				}
			}
		}
		return nil, false
	case tokMIGLegacy:
		for _, p := range phys {
			g := gpus[p.GPU]
			if g.UUID == "" || !strings.EqualFold(g.UUID, t.UUID) {
				continue
			}
			for m, mi := range g.MIG {
				if mi.GI == t.GI && mi.CI == t.CI {
					return []pick{{GPU: p.GPU, MIG: m}}, true
				}
			}
		}
		return nil, false
	}
	return nil, false
}

// flatten turns picks into Devices; a whole MIG-enabled GPU becomes its MIG
// devices.
func flatten(gpus []gpuInfo, picks []pick, notes *[]string) []Device {
	devs := []Device{}
	seen := map[pick]bool{}
	add := func(p pick) {
		if seen[p] {
			return
		}
		seen[p] = true
		g := gpus[p.GPU]
		if p.MIG >= 0 {
			devs = append(devs, migDevice(g, g.MIG[p.MIG]))
			return
		}
		devs = append(devs, Device{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryBytes: g.MemoryBytes})
	}
	for _, p := range picks {
		g := gpus[p.GPU]
		switch {
		case p.MIG >= 0 || !g.MIGEnabled:
			add(p)
		case len(g.MIG) == 0:
			if !seen[p] {
				seen[p] = true
				*notes = append(*notes, fmt.Sprintf("MIG mode is enabled on GPU %d (%s) but it has no MIG devices; "+
					"create GPU and compute instances (nvidia-smi mig -cgi <profiles> -C) or disable MIG mode", g.Index, g.UUID))
			}
		default:
			for m := range g.MIG {
				add(pick{GPU: p.GPU, MIG: m})
			}
		}
	}
	return devs
}

func migDevice(g gpuInfo, mi migInfo) Device {
	model := mi.Model
	if model == "" {
		model = g.Model + " MIG"
	}
	return Device{Index: g.Index, UUID: mi.UUID, Model: model, MemoryBytes: mi.MemoryBytes, MIG: true, Parent: g.UUID}
}

func noDeviceReason(gpus []gpuInfo, picks []pick) string {
	for _, p := range picks {
		if !gpus[p.GPU].MIGEnabled || len(gpus[p.GPU].MIG) > 0 {
			return "no usable GPU"
		}
	}
	if len(picks) > 0 {
		return "every visible GPU has MIG mode enabled but no MIG devices; create MIG devices " +
			"(nvidia-smi mig -cgi <profiles> -C) or disable MIG mode (nvidia-smi -mig 0)"
	}
	return "no usable GPU"
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isUUIDChars reports whether s looks like (a prefix of) a UUID body.
func isUUIDChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
