package eval

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is one line of a panel, with an optional confidence band.
type series struct {
	name   string
	xs, ys []float64
	lo, hi []float64 // band (nil: none)
	dashed bool
	points bool        // draw point markers
	col    *color.RGBA // nil: colorOf(name)
}

// palette gives each mechanism the same colour in every figure.
var palette = map[string]color.RGBA{
	"dirichlet-concentrated": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	"dirichlet-diffuse":      {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	"dirichlet-exact":        {R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	"gaussian":               {R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	"gaussian-unprojected":   {R: 0x8c, G: 0x1a, B: 0x1a, A: 0xff}, // dark red, dashed
	"laplace":                {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	"exact divergence":       {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"reverse direction":      {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"guarantee (Alg. 1)":     {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"uniform baseline":       {R: 0x40, G: 0x40, B: 0x40, A: 0xff},
	"sampling error":         {R: 0x40, G: 0x40, B: 0x40, A: 0xff},
	"uniform truth":          {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"skewed truth":           {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

func colorOf(name string, i int) color.RGBA {
	if c, ok := palette[name]; ok {
		return c
	}
	others := []color.RGBA{{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, {R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}}
	return others[i%len(others)]
}

// newPanel builds one panel. Non-positive values are dropped on log axes.
func newPanel(title, xlabel, ylabel string, logX, logY bool, ss []series, legend bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	p.Add(plotter.NewGrid())
	ok := func(x, y float64) bool {
		return !math.IsNaN(x) && !math.IsNaN(y) && !math.IsInf(x, 0) && !math.IsInf(y, 0) && (!logX || x > 0) && (!logY || y > 0)
	}
	for i, s := range ss {
		c := colorOf(s.name, i)
		if s.col != nil {
			c = *s.col
		}
		if s.lo != nil {
			var poly plotter.XYs
			for j := range s.xs {
				if ok(s.xs[j], s.lo[j]) && ok(s.xs[j], s.hi[j]) {
					poly = append(poly, plotter.XY{X: s.xs[j], Y: s.hi[j]})
				}
			}
			for j := len(s.xs) - 1; j >= 0; j-- {
				if ok(s.xs[j], s.lo[j]) && ok(s.xs[j], s.hi[j]) {
					poly = append(poly, plotter.XY{X: s.xs[j], Y: s.lo[j]})
				}
			}
			if len(poly) >= 3 {
				band, err := plotter.NewPolygon(poly)
				if err != nil {
					return nil, err
				}
				band.Color = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 0x50} // not premultiplied
				band.LineStyle.Width = 0
				p.Add(band)
			}
		}
		var xys plotter.XYs
		for j := range s.xs {
			if ok(s.xs[j], s.ys[j]) {
				xys = append(xys, plotter.XY{X: s.xs[j], Y: s.ys[j]})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		if s.points {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, err
			}
			sc.Color = c
			sc.Radius = vg.Points(2.2)
			p.Add(sc)
		}
		if legend {
			p.Legend.Add(s.name, l)
		}
	}
	p.Legend.Top = false // bottom left: the curves here fall from the top left
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p, nil
}

// saveGrid renders rows × cols panels (nil entries are left blank) into a
// PNG at path.
func saveGrid(path string, plots [][]*plot.Plot, w, h vg.Length) error {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	rows, cols := len(plots), len(plots[0])
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 3}
	canvases := plot.Align(plots, t, dc)
	for j := range plots {
		for i, p := range plots[j] {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("eval: write %s: %w", path, err)
	}
	return f.Close()
}

// logTicks labels powers of ten, and also 2 and 5 times them when the axis
// spans less than two decades (every multiple if that still labels fewer
// than two); minor ticks at every other multiple.
// (plot.LogTicks starts at 10^trunc(log10(min)) and so shows no tick at
// all on a range inside one decade below 1.)
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	few := math.Log10(hi/lo) < 2
	for k := math.Floor(math.Log10(lo)); k <= math.Ceil(math.Log10(hi)); k++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, k)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (few && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	labelled := 0
	for _, t := range ticks {
		if t.Label != "" {
			labelled++
		}
	}
	if labelled < 2 { // a range within a decade: label every tick
		for i := range ticks {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', -1, 64)
		}
	}
	return ticks
}
