# Sourced by the Python examples' run scripts (with $root and $bin set): builds build/Release when
# the package or the tools are missing, sets $python to Debian's Python 3 (/usr/bin/python3 when
# it exists: another python3 first on PATH may lack numpy) unless PYTHON is set, and exports
# PYTHONPATH with the built package first unless CLEAVE_PYTHONPATH names another (an installed
# package: CLEAVE_PYTHONPATH= uses whatever the Python finds).
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
package_dir=${CLEAVE_PYTHONPATH-$root/build/Release/python}
if { [ -n "$package_dir" ] && [ "$package_dir" = "$root/build/Release/python" ] &&
  ! compgen -G "$package_dir/cleave/_cleave*.so" > /dev/null; } ||
  [ ! -x "$bin/cleave-run" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release
fi
if [ -n "$package_dir" ]; then
  export PYTHONPATH=$package_dir${PYTHONPATH:+:$PYTHONPATH}
fi
