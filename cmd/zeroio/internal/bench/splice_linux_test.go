package bench

import (
	"os"
	"testing"
)

// The file ends of the splice cases live on tmpfs, in memory: an
// interrupted zeroio bench (StopAll) must remove them, not only the
// benchmark's cleanup that an interrupt never reaches.
func TestStopAllRemovesSpliceDir(t *testing.T) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm: the cases use a testing temporary directory")
	}
	var dir string
	testing.Benchmark(func(b *testing.B) {
		if dir == "" {
			dir = benchDir(b)
			stopAll(t)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("StopAll left %s: %v", dir, err)
			}
		}
	})
	os.RemoveAll(dir)
}
