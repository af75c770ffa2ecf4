// Package stream copies a session's streams with a buffer that starts
// small and grows once the data streams: worker-agent's command output to
// the channel (sshd), and a client's channel to its stdout, stderr and
// from its stdin (agent/rsh). An idle stream (an MPI daemon's occasional
// line) then holds a few KiB for the job's whole life instead of a fixed
// 32 KiB, which adds up over the sessions the launcher serves for every
// worker, while a stream that fills its buffer is read in large pieces.
package stream

import "io"

// Copy copies src to dst until src ends (nil, also for io.EOF) or a write
// fails (that error). It reads into a buffer of small bytes that grows to
// large once a read fills it.
func Copy(dst io.Writer, src io.Reader, small, large int) error {
	buf := make([]byte, small)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return nil
		}
		if n == len(buf) && len(buf) < large {
			buf = make([]byte, large)
		}
	}
}
