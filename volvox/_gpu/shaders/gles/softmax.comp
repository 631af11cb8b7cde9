#version 310 es
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _5
{
    uint _m0;
    uint _m1;
    float _m2;
};

layout(binding = 0, std430) readonly buffer _11_10
{
    float _m0[];
} _10;

layout(binding = 1, std430) buffer _14_13
{
    float _m0[];
} _13;

layout(binding = 2, std430) readonly buffer _17_16
{
    _5 _m0;
} _16;

shared float _19[64];

void main()
{
    float _44 = -3.0000000054977557577780399428115e+38;
    uint _49 = 32u;
    float _50 = 0.0;
    uint _53 = 32u;
    uvec2 _82 = uvec2(4294967295u);
    uvec2 _122 = uvec2(4294967295u);
    uvec2 _159 = uvec2(4294967295u);
    uvec2 _197 = uvec2(4294967295u);
    uvec2 _235 = uvec2(4294967295u);
    uint _61 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_61 >= _16._m0._m0)
    {
        return;
    }
    uint _70 = _16._m0._m1;
    uint _71 = _61 * _70;
    uint _46 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _82)))
        {
            break;
        }
        _82 -= uvec2(uint(_82.y == 0u), 1u);
        if (!(_46 < _16._m0._m1))
        {
            break;
        }
        _44 = max(_44, _16._m0._m2 * _10._m0[_71 + _46]);
        _46 += 64u;
        continue;
    }
    _19[gl_LocalInvocationIndex] = _44;
    barrier();
    for (;;)
    {
        if (all(equal(uvec2(0u), _122)))
        {
            break;
        }
        _122 -= uvec2(uint(_122.y == 0u), 1u);
        if (!(_49 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _49)
        {
            _19[gl_LocalInvocationIndex] = max(_19[gl_LocalInvocationIndex], _19[gl_LocalInvocationIndex + _49]);
        }
        barrier();
        _49 = _49 >> 1u;
        continue;
    }
    float _154 = _19[0u];
    barrier();
    uint _51 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _159)))
        {
            break;
        }
        _159 -= uvec2(uint(_159.y == 0u), 1u);
        if (!(_51 < _16._m0._m1))
        {
            break;
        }
        _50 += exp((_16._m0._m2 * _10._m0[_71 + _51]) - _154);
        _51 += 64u;
        continue;
    }
    _19[gl_LocalInvocationIndex] = _50;
    barrier();
    for (;;)
    {
        if (all(equal(uvec2(0u), _197)))
        {
            break;
        }
        _197 -= uvec2(uint(_197.y == 0u), 1u);
        if (!(_53 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _53)
        {
            _19[gl_LocalInvocationIndex] += _19[gl_LocalInvocationIndex + _53];
        }
        barrier();
        _53 = _53 >> 1u;
        continue;
    }
    float _230 = 1.0 / _19[0u];
    uint _54 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _235)))
        {
            break;
        }
        _235 -= uvec2(uint(_235.y == 0u), 1u);
        if (!(_54 < _16._m0._m1))
        {
            break;
        }
        _13._m0[_71 + _54] = exp((_16._m0._m2 * _10._m0[_71 + _54]) - _154) * _230;
        _54 += 64u;
        continue;
    }
}

