package splice

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const smallPipesEnv = "ZEROIO_SPLICE_SMALL_PIPES"

// TestSmallPipes runs TestSmallPipesChild as an unprivileged user, who
// gets small pipes from the kernel past pipe-user-pages-soft (pipe(7)).
// As root it re-executes a copy of the test binary as nobody.
func TestSmallPipes(t *testing.T) {
	if os.Getenv(smallPipesEnv) != "" {
		t.Skip("in the child")
	}
	soft, err := os.ReadFile("/proc/sys/fs/pipe-user-pages-soft")
	if err != nil || strings.TrimSpace(string(soft)) == "0" {
		t.Skipf("no pipe-user-pages-soft limit (%q, %v)", soft, err)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run the child as an unprivileged user")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "splice-small-pipes")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	bin := filepath.Join(dir, "splice.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestSmallPipesChild$", "-test.v")
	cmd.Env = append(os.Environ(), smallPipesEnv+"=1", "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestSmallPipesChild")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

// TestSmallPipesChild holds pipes until the kernel grants small ones,
// then copies through them.
func TestSmallPipesChild(t *testing.T) {
	if os.Getenv(smallPipesEnv) == "" {
		t.Skip("run by TestSmallPipes")
	}
	if os.Getuid() == 0 {
		t.Skip("root is not limited")
	}
	before := ReadStats()
	var held []*pipe
	defer func() {
		for _, p := range held {
			putPipe(p)
		}
	}()
	for range 80 { // 80 MiB asked, 64 MiB granted before the soft limit bites
		p, err := getPipe(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	last := held[len(held)-1]
	small := ReadStats().SmallPipes - before.SmallPipes
	t.Logf("last pipe granted %d bytes; %d small pipes", last.size, small)
	if small == 0 || last.size >= 1<<20 {
		t.Fatal("the kernel granted every pipe in full: no soft limit seen")
	}
	// Copy with every new pipe small; check content and the chunking.
	data := payload(4<<20+1, 16)
	src, feedEnd := tcpPair(t)
	done := feed(feedEnd, data)
	dst := ends[1].dst(t)
	var maxChunk int64
	// A limit keeps the copy on splice alone (see TestTinyPipes).
	c := Copier{Limit: int64(len(data)), Progress: func(n int64) { maxChunk = max(maxChunk, n) }}
	n, err := c.Copy(dst.dst, src)
	done()
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Copy = %d, %v", n, err)
	}
	if got := dst.result(); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
	if maxChunk > int64(last.size) {
		t.Fatalf("chunk of %d bytes through a %d-byte pipe", maxChunk, last.size)
	}
	t.Logf("largest chunk %d bytes", maxChunk)
}
