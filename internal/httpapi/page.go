package httpapi

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// web holds the dashboard: one self-contained HTML file (inline script and
// style, no external resource of any kind).
//
//go:embed web/index.html
var web embed.FS

var inlineBlock = regexp.MustCompile(`(?s)<(script|style)>(.*?)</(?:script|style)>`)

// loadPage returns the embedded page and a Content-Security-Policy that
// allows exactly its inline script and style (by hash), requests to this
// origin, and nothing else: no CDN, font, image or frame could load even if
// one crept into the file.
func loadPage() ([]byte, string, error) {
	page, err := web.ReadFile("web/index.html")
	if err != nil {
		return nil, "", fmt.Errorf("httpapi: embedded page: %w", err)
	}
	var scripts, styles []string
	for _, m := range inlineBlock.FindAllSubmatch(page, -1) {
		sum := sha256.Sum256(m[2])
		h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if string(m[1]) == "script" {
			scripts = append(scripts, h)
		} else {
			styles = append(styles, h)
		}
	}
	if len(scripts) == 0 || len(styles) == 0 {
		return nil, "", errors.New("httpapi: embedded page has no inline script or style")
	}
	csp := strings.Join([]string{
		"default-src 'none'",
		"script-src " + strings.Join(scripts, " "),
		"style-src " + strings.Join(styles, " "),
		"connect-src 'self'",
		"img-src data:",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
	return page, csp, nil
}
