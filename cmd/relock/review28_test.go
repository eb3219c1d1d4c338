package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestReview28_urlTrailingSlash: --url takes "redis://host:port/" (a trailing slash, as many
// tools print URLs) as database 0, with or without a query after it; a path that is not a
// database number is still refused with a clear error (exit 2). Before, the trailing slash was
// refused: `relock: --url: redis: invalid database number: ""`.
func TestReview28_urlTrailingSlash(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Mutex("held").Lock(bg))
	for _, url := range []string{
		"redis://" + srv.Addr() + "/",
		"redis://" + srv.Addr() + "/?dial_timeout=5s",
		"redis://" + srv.Addr() + "/0",
	} {
		out, errOut, code := relock(t, "", "inspect", "--url", url, "held")
		require.Equal(t, exitOK, code, "%s: %s", url, errOut)
		require.Contains(t, out, "holders           1", url)
	}
	for _, bad := range []struct{ url, says string }{
		{"redis://" + srv.Addr() + "/x", `invalid database number: "x"`},
		{"redis://" + srv.Addr() + "//", "invalid URL path"},
		{"redis://" + srv.Addr() + "/0/1", "invalid URL path"},
	} {
		_, errOut, code := relock(t, "", "inspect", "--url", bad.url, "held")
		require.Equal(t, exitUsage, code, "%s: %s", bad.url, errOut)
		require.Contains(t, errOut, bad.says, bad.url)
	}
}
