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

layout(binding = 1, std430) readonly buffer _14_13
{
    float _m0[];
} _13;

layout(binding = 2, std430) buffer _17_16
{
    float _m0[];
} _16;

layout(binding = 3, std430) readonly buffer _20_19
{
    _5 _m0;
} _19;

shared float _22[64];

void main()
{
    float _47 = 0.0;
    uint _52 = 32u;
    uvec2 _81 = uvec2(4294967295u);
    uvec2 _123 = uvec2(4294967295u);
    uvec2 _169 = uvec2(4294967295u);
    uint _60 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_60 >= _19._m0._m0)
    {
        return;
    }
    uint _69 = _19._m0._m1;
    uint _70 = _60 * _69;
    uint _49 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _81)))
        {
            break;
        }
        _81 -= uvec2(uint(_81.y == 0u), 1u);
        if (!(_49 < _19._m0._m1))
        {
            break;
        }
        _47 += (_10._m0[_70 + _49] * _10._m0[_70 + _49]);
        _49 += 64u;
        continue;
    }
    _22[gl_LocalInvocationIndex] = _47;
    barrier();
    for (;;)
    {
        if (all(equal(uvec2(0u), _123)))
        {
            break;
        }
        _123 -= uvec2(uint(_123.y == 0u), 1u);
        if (!(_52 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _52)
        {
            _22[gl_LocalInvocationIndex] += _22[gl_LocalInvocationIndex + _52];
        }
        barrier();
        _52 = _52 >> 1u;
        continue;
    }
    float _164 = 1.0 / sqrt((_22[0u] / float(_19._m0._m1)) + _19._m0._m2);
    uint _53 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(equal(uvec2(0u), _169)))
        {
            break;
        }
        _169 -= uvec2(uint(_169.y == 0u), 1u);
        if (!(_53 < _19._m0._m1))
        {
            break;
        }
        _16._m0[_70 + _53] = (_10._m0[_70 + _53] * _164) * _13._m0[_53];
        _53 += 64u;
        continue;
    }
}

