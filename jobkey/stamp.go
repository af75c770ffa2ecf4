package jobkey

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Stamp identifies one version of a file: the device and inode it resolves
// to, its size and its modification and change times. The kubelet updates a
// mounted Secret by writing a new timestamped directory and swapping the
// "..data" symlink the files point through, so after an update every file
// resolves to a new inode; an edit in place changes the times and usually
// the size. Comparing stamps costs one stat(2), which is what lets the SSH
// server re-check its keys on every connection.
type Stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

// IsZero reports whether s is the zero Stamp (no file seen).
func (s Stamp) IsZero() bool { return s == Stamp{} }

func stampOf(fi fs.FileInfo) Stamp {
	st := Stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(sys.Dev), sys.Ino //nolint:unconvert // Dev is uint32 on some platforms
		st.ctime = sys.Ctim.Sec*1e9 + sys.Ctim.Nsec
	}
	return st
}

// StatStamp returns the Stamp of path, following symlinks.
func StatStamp(path string) (Stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Stamp{}, &Error{Path: path, Op: "stat", Err: err, Hint: hintFor(err)}
	}
	return stampOf(fi), nil
}

// ReadFileStamped reads a key file like ReadFile and returns the Stamp of
// the very file it read (taken from the open file, so a swap between the
// check and the read cannot pair one version's stamp with another's data).
func ReadFileStamped(path string) ([]byte, Stamp, error) {
	// O_NONBLOCK: a FIFO in the key's place must not block the open; it is
	// refused below as not a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, Stamp{}, &Error{Path: path, Op: "read", Err: err, Hint: hintFor(err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, Stamp{}, &Error{Path: path, Op: "read", Err: err}
	}
	if err := checkInfo(path, fi); err != nil {
		return nil, Stamp{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxKeyFileSize+1))
	if err != nil {
		return nil, Stamp{}, &Error{Path: path, Op: "read", Err: err}
	}
	if len(data) > MaxKeyFileSize {
		return nil, Stamp{}, &Error{Path: path, Op: "read", Err: fmt.Errorf("larger than %d bytes", MaxKeyFileSize), Hint: "this is not an SSH key file"}
	}
	return data, stampOf(fi), nil
}
