-- gateway_glob_like turns a glob (* any run, ? one character) into a LIKE
-- pattern.
CREATE OR REPLACE FUNCTION gateway_glob_like(p text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT replace(replace(replace(replace(replace(p, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%'), '?', '_')
$$;
