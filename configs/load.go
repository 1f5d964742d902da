package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
	yamlv3 "go.yaml.in/yaml/v3"
)

const (
	envPrefix = "KGATE_"
	// envConfig names the YAML file when --config is not given.
	envConfig = "KGATE_CONFIG"
)

// ErrHelp is returned by Load after -h or --help printed the usage; the
// caller should exit 0.
var ErrHelp = errors.New("configs: help requested")

// helpOutput receives the usage printed by -h/--help; tests replace it.
var helpOutput io.Writer = os.Stdout

// field is one leaf key of Config, found by reflection over the koanf tags.
type field struct {
	key   string // "kafka.max_frame_bytes"
	env   string // "KGATE_KAFKA_MAX_FRAME_BYTES"
	help  string
	index []int // reflect field path from Config
	typ   reflect.Type
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	fields       = schema()
	fieldByKey   = make(map[string]field, len(fields))
	sections     = make(map[string]bool)
)

func init() {
	for _, f := range fields {
		fieldByKey[f.key] = f
		sections[strings.SplitN(f.key, ".", 2)[0]] = true
	}
}

// schema lists every leaf key of Config in declaration order.
func schema() []field {
	var out []field
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sec := ct.Field(i)
		secKey := sec.Tag.Get("koanf")
		if secKey == "" || strings.Contains(secKey, "_") || sec.Type.Kind() != reflect.Struct {
			panic("configs: section " + sec.Name + " needs a koanf tag without '_'")
		}
		for j := range sec.Type.NumField() {
			f := sec.Type.Field(j)
			name, help := f.Tag.Get("koanf"), f.Tag.Get("help")
			if name == "" || help == "" {
				panic("configs: field " + sec.Name + "." + f.Name + " needs koanf and help tags")
			}
			key := secKey + "." + name
			out = append(out, field{
				key:   key,
				env:   envName(key),
				help:  help,
				index: []int{i, j},
				typ:   f.Type,
			})
		}
	}
	return out
}

// envName maps kafka.max_frame_bytes to KGATE_KAFKA_MAX_FRAME_BYTES.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envKey maps KGATE_KAFKA_MAX_FRAME_BYTES to kafka.max_frame_bytes: section
// names hold no '_', so only the first '_' after the prefix is a '.'. ok is
// false for a name outside every section (KGATE_TEST_*, KGATE_CONFIG), which
// Load leaves alone for tools and test harnesses.
func envKey(name string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(name, envPrefix)
	if !ok {
		return "", false
	}
	sec, leaf, ok := strings.Cut(strings.ToLower(rest), "_")
	if !ok || !sections[sec] {
		return "", false
	}
	return sec + "." + leaf, true
}

// Load builds the configuration from, lowest precedence first: Default(),
// the YAML file named by --config (or KGATE_CONFIG; none if both are
// empty), KGATE_* variables in environ, and the flags in args (the
// command line without the program name). It returns the validated Config,
// ErrHelp after printing usage for -h/--help, or errors naming the bad key.
//
// A variable under a known section must name a known key, so a typo like
// KGATE_KAFKA_LISTN fails instead of being ignored (Kubernetes service-link
// variables excepted); likewise unknown keys in the YAML file.
func Load(args []string, environ []string) (Config, error) {
	fs := newFlagSet()
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("configs: %w", err)
	}
	if help, _ := fs.GetBool("help"); help {
		writeUsage(helpOutput, fs)
		return Config{}, ErrHelp
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("configs: unexpected argument %q", fs.Arg(0))
	}

	ko := koanf.New(".")
	if err := ko.Load(confmap.Provider(defaultsFlat(), "."), nil); err != nil {
		return Config{}, fmt.Errorf("configs: defaults: %w", err)
	}

	path, _ := fs.GetString("config")
	if !fs.Changed("config") {
		path = lookupEnv(environ, envConfig)
	}
	if path != "" {
		layer, err := readFile(path)
		if err != nil {
			return Config{}, err
		}
		if err := ko.Load(confmap.Provider(layer, "."), nil); err != nil {
			return Config{}, fmt.Errorf("configs: %s: %w", path, err)
		}
	}

	var envErrs []error
	envProvider := env.Provider(".", env.Opt{
		Prefix:      envPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, val string) (string, any) {
			key, ok := envKey(name)
			if !ok {
				return "", nil
			}
			f, known := fieldByKey[key]
			if !known {
				if !serviceLink(name, val) {
					envErrs = append(envErrs, fmt.Errorf("configs: %s: unknown key %q", name, key))
				}
				return "", nil
			}
			// Weak typing reads "" as false or 0; only text and lists have an empty value.
			if val == "" && f.typ.Kind() != reflect.String && f.typ.Kind() != reflect.Slice {
				envErrs = append(envErrs, keyErr(key, "%s is empty: give a value or unset it", name))
				return "", nil
			}
			return key, val
		},
	})
	if err := ko.Load(envProvider, nil); err != nil {
		return Config{}, fmt.Errorf("configs: environment: %w", err)
	}
	if len(envErrs) > 0 {
		return Config{}, errors.Join(envErrs...)
	}

	// Without a koanf instance posflag merges only the flags actually set,
	// so a flag's default never hides the file or the environment.
	flagProvider := posflag.ProviderWithFlag(fs, ".", nil, func(f *pflag.Flag) (string, any) {
		if _, ok := fieldByKey[f.Name]; !ok { // --config, --help
			return "", nil
		}
		return f.Name, posflag.FlagVal(fs, f)
	})
	if err := ko.Load(flagProvider, nil); err != nil {
		return Config{}, fmt.Errorf("configs: flags: %w", err)
	}

	var c Config
	if err := decode(ko, &c); err != nil {
		return Config{}, err
	}
	normalizeLists(&c)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func newFlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("kgate", pflag.ContinueOnError)
	// Load reports parse errors itself and prints usage only for --help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false

	fs.String("config", "", "YAML config file (default $"+envConfig+")")
	def := reflect.ValueOf(Default())
	for _, f := range fields {
		v := def.FieldByIndex(f.index)
		switch {
		case f.typ == durationType:
			fs.Duration(f.key, time.Duration(v.Int()), f.help)
		case f.typ.Kind() == reflect.String:
			fs.String(f.key, v.String(), f.help)
		case f.typ.Kind() == reflect.Bool:
			fs.Bool(f.key, v.Bool(), f.help)
		case isInteger(f.typ):
			fs.Var(&intFlag{n: v.Int(), typ: f.typ}, f.key, f.help)
		case f.typ == reflect.TypeFor[[]string]():
			fs.StringSlice(f.key, v.Interface().([]string), f.help)
		default:
			panic("configs: no flag type for " + f.key + " of type " + f.typ.String())
		}
	}
	fs.BoolP("help", "h", false, "print this help and exit")
	return fs
}

// intFlag is an integer flag that, like the file and the environment, takes
// plain base 10 only: pflag's own integer flags read --node.id 010 as 8.
type intFlag struct {
	n   int64
	typ reflect.Type
}

func (v *intFlag) Set(s string) error {
	n, err := parseInteger(s, v.typ)
	if err != nil {
		return err
	}
	v.n = n
	return nil
}

// String is also what posflag re-parses, with base 0: it must stay canonical.
func (v *intFlag) String() string { return strconv.FormatInt(v.n, 10) }

// Type names the flag's type in --help as pflag's own flags do: int, int32.
func (v *intFlag) Type() string { return v.typ.Kind().String() }

func writeUsage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, `Usage: kgate [flags]

Settings are layered, later wins: defaults, the YAML file (--config or
$%s), %s* environment variables, flags. Every flag is also a
YAML key (kafka.listen) and a variable (%s).
Lists are comma-separated: --redis.addrs a:6379,b:6379.
Durations take units: 500ms, 3s, 30m.

Flags:
%s`, envConfig, envPrefix, envName("kafka.listen"), fs.FlagUsages())
}

func defaultsFlat() map[string]any {
	def := reflect.ValueOf(Default())
	m := make(map[string]any, len(fields))
	for _, f := range fields {
		m[f.key] = def.FieldByIndex(f.index).Interface()
	}
	return m
}

// serviceLinkName matches the names Kubernetes service links give a Service's
// variables: kgate-redis yields KGATE_REDIS_SERVICE_HOST, _SERVICE_PORT,
// _SERVICE_PORT_<port name> and the Docker-link style _PORT_6379_TCP with
// _ADDR, _PORT and _PROTO. The bare _PORT is told by its value instead.
var serviceLinkName = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_.+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_ADDR|_PORT|_PROTO)?)$`)

// serviceLink reports whether name=val, not a key, is one of the variables
// Kubernetes injects for every Service in the namespace (enableServiceLinks
// is on by default): a Service named kgate-<section>... must not stop kgate,
// while a typo such as KGATE_REDIS_ADRS or KGATE_REDIS_PORT=6379 still does.
func serviceLink(name, val string) bool {
	if serviceLinkName.MatchString(name) {
		return true
	}
	if !strings.HasSuffix(name, "_PORT") {
		return false
	}
	for _, scheme := range []string{"tcp://", "udp://", "sctp://"} {
		if strings.HasPrefix(val, scheme) {
			return true
		}
	}
	return false
}

func lookupEnv(environ []string, name string) string {
	val := ""
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val = v // the last one wins, as with a shell's environment
		}
	}
	return val
}

// readFile parses the YAML file at path and returns its known keys as a flat
// map; an unknown key is an error naming it. A section left empty (every key
// commented out) is allowed and sets nothing; a key left empty is refused.
func readFile(path string) (map[string]any, error) {
	fk := koanf.New(".")
	parser := &numberParser{}
	if err := fk.Load(file.Provider(path), parser); err != nil {
		return nil, fmt.Errorf("configs: read %s: %w", path, err)
	}
	layer := make(map[string]any)
	var errs []error
	for key, val := range fk.All() {
		if f, ok := fieldByKey[key]; ok {
			if err := checkScalar(path, f, val); err != nil {
				errs = append(errs, err)
				continue
			}
			if text, ok := parser.numbers[key]; ok && isInteger(f.typ) {
				val = text // for intHook to read in base 10, as it reads the environment
			}
			layer[key] = val
			continue
		}
		if sections[key] && isEmpty(val) {
			continue
		}
		errs = append(errs, fmt.Errorf("configs: %s: unknown key %q", path, key))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return layer, nil
}

// numberParser is koanf's YAML parser that also keeps the text of each number
// given to a key, which the parsed value hides: YAML reads 010 and 0o10 as 8,
// 0x10 as 16, and 1_0 and 1e1 as 10.
type numberParser struct {
	yaml.YAML
	numbers map[string]string // "node.id" -> "010"
}

func (p *numberParser) Unmarshal(b []byte) (map[string]any, error) {
	m, err := p.YAML.Unmarshal(b) // first: it refuses what the walk below could not end on (an anchor within itself)
	if err != nil {
		return nil, err
	}
	// The parser reads the first document alone: keys in a document after a "---" line would be
	// ignored without a word. One that sets nothing (a trailing "---", comments) is let through.
	dec := yamlv3.NewDecoder(bytes.NewReader(b))
	for n := 0; ; n++ {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			if len(doc.Content) > 0 {
				p.numbers = numberLiterals(doc.Content[0])
			}
			continue
		}
		if len(doc.Content) > 0 && doc.Content[0].ShortTag() != "!!null" {
			return nil, fmt.Errorf("a second YAML document (after a \"---\" line) begins at line %d: kgate reads one document per file; merge them",
				doc.Content[0].Line)
		}
	}
}

// numberLiterals maps each key under root, at any depth, its parts joined by "." as koanf joins them
// (a dotted key, node.id: 010, counts as written), to the text of its number. Keys merged in with <<:
// give way to the mapping's own, and earlier merged mappings to later ones, as YAML merges them.
func numberLiterals(root *yamlv3.Node) map[string]string {
	out := make(map[string]string)
	var walk func(n *yamlv3.Node, prefix string)
	walk = func(n *yamlv3.Node, prefix string) {
		if n.Kind == yamlv3.AliasNode {
			n = n.Alias
		}
		switch {
		case n.Kind == yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 { // merged keys first: the mapping's own win
				if n.Content[i].Tag != "!!merge" {
					continue
				}
				v := n.Content[i+1]
				if v.Kind == yamlv3.SequenceNode {
					for j := len(v.Content) - 1; j >= 0; j-- { // the first merged mapping wins
						walk(v.Content[j], prefix)
					}
				} else {
					walk(v, prefix)
				}
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Tag == "!!merge" {
					continue
				}
				key := n.Content[i].Value
				if prefix != "" {
					key = prefix + "." + key
				}
				// The mapping's own value replaces a merged one whole (YAML merges are shallow),
				// even when it is no number.
				for k := range out {
					if k == key || strings.HasPrefix(k, key+".") {
						delete(out, k)
					}
				}
				walk(n.Content[i+1], key)
			}
		case n.Kind == yamlv3.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float"):
			out[prefix] = n.Value
		}
	}
	walk(root, "")
	return out
}

// checkScalar refuses a YAML value that weak typing would turn into something
// not written. A key with no value is YAML null, which would decode to the
// zero value (idle_timeout: alone would mean never). A string key refuses a
// number or bool: YAML reads an unquoted 0123 as 83, 0x1F as 31, 1e3 as 1000
// and true as a bool, and weak typing would then store "83", "31", "1000" or
// "1": not the text written, and not what the same text in a KGATE_*
// variable gives. Likewise an integer key refuses a bool (true as 1), a
// bool key a number (0 as false), and a key other than text or a list an
// empty string ("" as false). The message leaves the value out, as the key
// may be redis.password.
func checkScalar(path string, f field, val any) error {
	if val == nil {
		return keyErr(f.key, "no value: give one or remove the key in %s", path)
	}
	var kind string
	switch v := val.(type) {
	case string:
		// Weak typing reads "" as false, as the environment's empty value, which it refuses; only text
		// and lists have an empty value.
		if v == "" && f.typ.Kind() != reflect.String && f.typ.Kind() != reflect.Slice {
			return keyErr(f.key, "empty value: give one or remove the key in %s", path)
		}
		return nil
	case bool:
		kind = "bool"
	case int, int64, uint64, float64:
		kind = "number"
	default:
		return nil
	}
	switch {
	case f.typ.Kind() == reflect.String:
		return keyErr(f.key, "YAML reads the unquoted value as a %s, not a string: quote it in %s", kind, path)
	case f.typ.Kind() == reflect.Bool && kind == "number":
		return keyErr(f.key, "YAML reads the value as a number, not a bool: write true or false in %s", path)
	case isInteger(f.typ) && kind == "bool":
		return keyErr(f.key, "YAML reads the value as a bool, not an integer: write a number in %s", path)
	}
	return nil
}

func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

// decode unmarshals the merged layers into c. Strings from the environment
// are weakly typed ("true" -> bool), integers are base 10 ("9092"),
// durations take units ("3s") and lists are comma-separated. Each failure is
// a *KeyError.
func decode(ko *koanf.Koanf, c *Config) error {
	err := ko.UnmarshalWithConf("", c, koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				durationHook,
				mapstructure.StringToSliceHookFunc(","),
				intHook,
			),
			WeaklyTypedInput: true,
			ErrorUnused:      true,
		},
	})
	if err == nil {
		return nil
	}
	var errs []error
	collectDecodeErrors(err, &errs)
	if len(errs) == 0 {
		return fmt.Errorf("configs: %w", err)
	}
	return errors.Join(errs...)
}

// collectDecodeErrors turns mapstructure's field errors, which name the
// dotted key, into KeyErrors.
func collectDecodeErrors(err error, out *[]error) {
	if de, ok := err.(*mapstructure.DecodeError); ok {
		inner := de.Unwrap()
		var pe *mapstructure.ParseError
		if errors.As(inner, &pe) {
			// mapstructure's own text omits the value that failed.
			inner = fmt.Errorf("cannot parse %q as %s", fmt.Sprint(pe.Value), pe.Expected.Type())
		}
		*out = append(*out, &KeyError{Key: de.Name(), Err: inner})
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectDecodeErrors(e, out)
		}
		return
	}
	if e := errors.Unwrap(err); e != nil {
		collectDecodeErrors(e, out)
		return
	}
	*out = append(*out, fmt.Errorf("configs: %w", err))
}

// durationHook parses "3s"-style strings, and refuses a unitless number,
// which weak typing would read as nanoseconds ("dial_timeout: 2" as 2ns).
// Zero needs no unit. It replaces mapstructure.StringToTimeDurationHookFunc,
// whose error drops the offending text.
func durationHook(f, t reflect.Type, data any) (any, error) {
	if t != durationType || f == durationType {
		return data, nil
	}
	switch f.Kind() {
	case reflect.String:
		d, err := time.ParseDuration(strings.TrimSpace(data.(string)))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration such as \"3s\" or \"500ms\"", data)
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("%v has no unit; write a duration such as \"3s\"", data)
	}
	return data, nil
}

// intHook reads an integer key. Text (a KGATE_* variable, a quoted or
// numeric YAML value) goes through parseInteger, as weak typing would parse
// it with base 0. A number that does not fit the target type is refused
// instead of wrapping (node.id: 4294967296 would become 0).
func intHook(f, t reflect.Type, data any) (any, error) {
	if !isInteger(t) {
		return data, nil
	}
	v := reflect.ValueOf(data)
	var n int64
	switch f.Kind() {
	case reflect.String:
		return parseInteger(v.String(), t)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n = v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() > 1<<63-1 {
			return nil, fmt.Errorf("%v is out of range for %s", data, t)
		}
		n = int64(v.Uint())
	case reflect.Float32, reflect.Float64:
		fl := v.Float()
		if fl != float64(int64(fl)) {
			return nil, fmt.Errorf("%v is not an integer", data)
		}
		n = int64(fl)
	default:
		return data, nil
	}
	if reflect.New(t).Elem().OverflowInt(n) {
		return nil, fmt.Errorf("%v is out of range for %s", data, t)
	}
	return data, nil
}

// plainInteger is an optionally signed base-10 integer without leading
// zeros, which some readers take as octal.
var plainInteger = regexp.MustCompile(`^[+-]?(0|[1-9][0-9]*)$`)

// parseInteger reads s as an integer of type t. Only plain base 10 is
// accepted from every source: Go's base 0, used by weak typing and by
// pflag, reads 010 as 8, 0x10 as 16 and 1_0 as 10.
func parseInteger(s string, t reflect.Type) (int64, error) {
	if !plainInteger.MatchString(s) {
		return 0, fmt.Errorf("%q is not an integer in plain base 10, such as 10 or -1", s)
	}
	n, err := strconv.ParseInt(s, 10, t.Bits())
	if err != nil {
		return 0, fmt.Errorf("%s is out of range for %s", s, t)
	}
	return n, nil
}

// isInteger reports whether t is an integer key's type; a duration is not.
func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return t != durationType
	}
	return false
}

// normalizeLists trims spaces around list items and drops empty ones, so
// "a:6379, b:6379" and a trailing comma both do what was meant.
func normalizeLists(c *Config) {
	v := reflect.ValueOf(c).Elem()
	for _, f := range fields {
		if f.typ != reflect.TypeFor[[]string]() {
			continue
		}
		lv := v.FieldByIndex(f.index)
		in, _ := lv.Interface().([]string)
		out := make([]string, 0, len(in))
		for _, s := range in {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			out = nil
		}
		lv.Set(reflect.ValueOf(out))
	}
}
