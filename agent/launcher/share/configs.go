package share

import (
	"path/filepath"
	"sync"
	"syscall"

	"github.com/podmpi/podmpi/agent/sshclient"
	"github.com/podmpi/podmpi/jobkey"
)

// configs keeps the job configurations the launcher loaded for the relays
// it serves: every relay names the same auth dir, and reading and parsing
// the keys again for each session is a tenth of a millisecond of a shared
// command's few. An entry holds while the directory the keys are found in
// and the key files are the same (device, inode, size, modification and
// change times, after symlinks): the kubelet's update of a mounted Secret
// swaps its files, and the next session loads them anew.
type configs struct {
	mu sync.Mutex
	m  map[configKey]cachedConfig
}

type configKey struct{ authDir, home, identity string }

type cachedConfig struct {
	dir   string
	files [2]fileStamp // the private key, the public key
	cfg   sshclient.Config
}

type fileStamp struct {
	dev, ino, size   uint64
	mtime, ctime     int64
	mtimeNs, ctimeNs int64
}

func stampOf(path string) fileStamp {
	var st syscall.Stat_t
	if path == "" || syscall.Stat(path, &st) != nil {
		return fileStamp{}
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Sec, mtimeNs: st.Mtim.Nsec,
		ctime: st.Ctim.Sec, ctimeNs: st.Ctim.Nsec}
}

// keyFiles are the files a configuration loaded from dir was read from.
func keyFiles(dir, identity string) [2]fileStamp {
	key := identity
	if key == "" && dir != "" {
		key = filepath.Join(dir, jobkey.PrivateKey)
	}
	pub := ""
	if dir != "" {
		pub = filepath.Join(dir, jobkey.PublicKey)
	}
	return [2]fileStamp{stampOf(key), stampOf(pub)}
}

// load is sshclient.LoadJobConfig, from the cache while its files are the
// same.
func (c *configs) load(authDir, home, identity string) (sshclient.Config, error) {
	k := configKey{authDir, home, identity}
	dir, _ := jobkey.Find(authDir, home, jobkey.PrivateKey)
	files := keyFiles(dir, identity)
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && e.dir == dir && e.files == files {
		return e.cfg, nil
	}
	cfg, err := sshclient.LoadJobConfig(authDir, home, identity)
	if err != nil {
		return cfg, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[configKey]cachedConfig{}
	}
	c.m[k] = cachedConfig{dir: dir, files: files, cfg: cfg}
	return cfg, nil
}
